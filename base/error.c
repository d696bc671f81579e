/* error.c - names and messages for ftrt return codes (one X-macro table in ftrt.h), and the
 * library's version. */
#include <errno.h>
#include <string.h>

#include "ftrt.h"

const char *ftrt_strerror(int code)
{
    switch (code) {
    case 0: return "success";
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

int ftrt_version(int *major, int *minor, int *patch)
{
    if (major) *major = FTRT_VERSION_MAJOR;
    if (minor) *minor = FTRT_VERSION_MINOR;
    if (patch) *patch = FTRT_VERSION_PATCH;
    return FTRT_VERSION_MAJOR * 10000 + FTRT_VERSION_MINOR * 100 + FTRT_VERSION_PATCH;
}
