/* error.c - names and messages for ftrt return codes (one X-macro table in ftrt.h). */
#include <errno.h>
#include <string.h>

#include "ftrt.h"

const char *ftrt_strerror(int code)
{
    switch (code) {
    case 0: return "success";
    case FTRT_DONE: return "this rank's role ended: finalize and exit without training";
    case FTRT_SKIP_MPI_FINALIZE:
        return "a process died during the job: exit without calling MPI_Finalize";
#define FTRT__MSG(name, value, msg)                                                                \
    case name: return msg;
        FTRT_ERROR_MAP(FTRT__MSG)
#undef FTRT__MSG
    default: break;
    }
    if (code < 0 && code > -4096) {
        /* strerrordesc_np is thread-safe and returns static storage (glibc >= 2.32). */
        const char *s = strerrordesc_np(-code);
        if (s) return s;
    }
    return "unknown ftrt error code";
}

const char *ftrt_err_name(int code)
{
    switch (code) {
    case 0: return "OK";
    case FTRT_DONE: return "FTRT_DONE";
    case FTRT_SKIP_MPI_FINALIZE: return "FTRT_SKIP_MPI_FINALIZE";
#define FTRT__NAME(name, value, msg)                                                               \
    case name: return #name;
        FTRT_ERROR_MAP(FTRT__NAME)
#undef FTRT__NAME
    default: break;
    }
    if (code < 0 && code > -4096) {
        const char *s = strerrorname_np(-code);
        if (s) return s;
    }
    return "UNKNOWN";
}
