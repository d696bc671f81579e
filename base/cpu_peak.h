/*
 * cpu_peak.h - the CPU's peak FLOP/s for eMFU, from a table (base/cpu_peak.c): the parts that
 * take their inputs as arguments, so that the unit tests can give them a made-up
 * /proc/cpuinfo; ftrt_cpu_peak_flops() and ftrt_host_trainers() (include/ftrt.h) read the
 * real ones.
 */
#ifndef FTRT_BASE_CPU_PEAK_H
#define FTRT_BASE_CPU_PEAK_H

#include <stddef.h>

#include "ftrt.h"

/* What the peak needs to know of the machine: the text of /proc/cpuinfo (NUL-terminated),
 * the highest clock cpufreq reports in MHz (0 when it reports none: the clocks of cpuinfo's
 * "cpu MHz" lines are used then), the online logical CPUs of the host and the logical CPUs
 * of the calling thread's affinity mask. */
typedef struct ftrt__cpu_host {
    const char *cpuinfo;
    double cpufreq_max_mhz;
    int online;
    int affinity;
} ftrt__cpu_host;

/*
 * The peak FLOP/s of one of `ranks` ranks that share the host `h` for `dtype`, from the table:
 * min(affinity, physical cores / ranks) x clock x FLOPs per cycle per core (base/cpu_peak.c
 * says how each is found). *flops receives it (0 on error); `src` (cap bytes, may be NULL
 * when cap is 0) how it was found or why it was not. Returns 0, FTRT_EINVAL (flops NULL,
 * ranks < 1, a dtype that is not floating-point, cpuinfo NULL) or FTRT_ENOTSUP (no row of
 * the table fits: not an x86 cpuinfo, no clock, no CPU counted). Thread-safe.
 */
int ftrt__cpu_peak(const ftrt__cpu_host *h, ftrt_dtype dtype, int ranks, double *flops,
                   char *src, size_t cap);

/*
 * A lower bound of the trainers on this host: local (the job's processes on this host, as the
 * launcher said; <= 0: not said) less the processes of the job that are not trainers
 * (world_size - trainers), at least 1. Pure; thread-safe.
 */
int ftrt__host_trainers_of(int local, int world_size, int trainers);

/* The job's processes on this host as the launcher says (Open MPI's
 * OMPI_COMM_WORLD_LOCAL_SIZE, else MPICH's MPI_LOCALNRANKS), or 0 when it does not. */
int ftrt__launcher_local_size(void);

#endif /* FTRT_BASE_CPU_PEAK_H */
