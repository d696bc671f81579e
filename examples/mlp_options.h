/*
 * mlp_options.h - the command line of examples/train_mlp: its options, parsed and checked
 * before the process joins the job (examples/mlp_options.c). The options are read by the
 * training loop (examples/train_mlp.c) and the model's memory (examples/mlp_state.c).
 */
#ifndef FTRT_EXAMPLE_MLP_OPTIONS_H
#define FTRT_EXAMPLE_MLP_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

/* Where the state (parameters and momentum) lives: --device host, sim or cuda. */
enum mlp_device { MLP_DEVICE_HOST, MLP_DEVICE_SIM, MLP_DEVICE_CUDA };

typedef struct options {
    int64_t steps;       /* total optimizer steps */
    size_t batch;        /* minibatch per logical rank */
    size_t hidden;       /* hidden units H */
    float lr;            /* learning rate */
    float momentum;      /* SGD momentum mu */
    uint64_t seed;       /* initial weights and minibatch sampling */
    int64_t ckpt_every;  /* steps between checkpoints; 0 = never */
    int64_t sleep_ms;    /* sleep after each step */
    int64_t check_every; /* ftrt_check() every this many hidden units of a pass; 0 = never */
    int64_t hang_step;   /* fault injection: logical rank hang_rank spins in its own code... */
    int64_t hang_rank;   /* ...from step hang_step on, in epoch 0 only (-1 = off) */
    int64_t error_step;  /* fault injection: logical rank error_rank stops at error_step with an */
    int64_t error_rank;  /* application error (ftrt_set_exit_code), -1 = off */
    int64_t die_step;    /* fault injection: logical rank die_rank SIGKILLs itself inside its */
    int64_t die_rank;    /* forward pass at die_step, epoch 0 only (-1 = off) */
    int64_t lag_step;    /* fault timing: logical rank lag_rank stops after lag_step's allreduce */
    int64_t lag_rank;    /* until a failure is announced, epoch 0 only (-1 = off) */
    int64_t hold_step[8]; /* timing knob: logical rank 0 sleeps hold_ms the first time it */
    int nhold;            /* reaches each of these steps (a fault lands mid-interval) */
    int64_t hold_ms;
    int64_t slow_rank;   /* straggler injection: this logical rank computes slow_ms longer */
    int64_t slow_ms;
    int64_t flip_rank;   /* silent data corruption: this logical rank flips a bit of its */
    int64_t flip_step;   /* parameters after its update of flip_step, in epoch 0 (-1 = off) */
    int64_t exit_rank;   /* test hook: world rank exit_rank returns exit_status from main() */
    int64_t exit_status; /* after ftrt_finalize() (without ftrt_set_exit_code); -1 = off */
    const char *ckpt_dir;   /* NULL = ftrt's default (FTRT_CKPT_DIR or "ftrt-ckpt") */
    const char *report;     /* NULL = ftrt's default (FTRT_REPORT) */
    const char *params_out; /* NULL = do not write */
    const char *data;       /* data set path (--data, else $DIGITS_DATA, else Debian's) */
    const char *step_log;   /* append "<logical rank> <step> <epoch>" per completed step */
    const char *pause_file; /* timing knob: logical rank 0 waits after each step while it exists */
    const char *publish;    /* test hook: write "<pid> <params address> <bytes> <steps address>"
                               to <publish>.w<world rank> (tools/ftrt-chaos flip-bit) */
    int sharded_momentum;   /* register the momentum buffer SHARDED (recovery from checkpoint) */
    int ftrt_alloc;         /* --ftrt-alloc: parameters and momentum from ftrt_alloc() */
    int ordered;            /* --ordered: gradients reduced in data-rank order */
    int no_total_steps;     /* --no-total-steps: ftrt_set_job_info() gets 0 (unknown) */
    enum mlp_device device; /* --device: host, the simulated device's memory, or CUDA memory */
    int check_device;       /* --check-device: report the GPU (exit 0) or why none (77) */
} options;

/* Parses argv into *o (defaults first). Returns 0 (run), 1 (--help printed on stdout: exit 0)
 * or -1 (a one-line message naming the option printed on stderr: exit 2). */
int parse_options(int argc, char **argv, options *o);

/* Checks the paths of --ckpt-dir, --params-out, --report and --step-log before the job starts
 * (each must be, or be creatable in, a directory of the right kind), so that every process
 * stops at once instead of failing inside the job. Returns 0 or -1 (a one-line message naming
 * the option, printed by world rank 0 only or when not under mpirun). */
int check_paths(const options *o);

#endif
