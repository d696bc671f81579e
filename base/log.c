/* log.c - stderr logging for libftrt, and ftrt_last_error(); see log.h. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ftrt.h"

int ftrt__log_level = FTRT__LOG_WARN;
int ftrt__log_rank = -1;

static const char *level_name(int level)
{
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    return (level >= 0 && level <= 3) ? names[level] : "?";
}

/* The calling thread's last error-level message (ftrt_last_error()). */
static _Thread_local char last_error[1024];

const char *ftrt_last_error(void)
{
    return last_error;
}

void ftrt__log(int level, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (level == FTRT__LOG_ERROR) memcpy(last_error, msg, strlen(msg) + 1);
    if (level > ftrt__log_level) return;
    const char *base = strrchr(file, '/');
    fprintf(stderr, "ftrt[w%d] %s %s:%d: %s\n", ftrt__log_rank, level_name(level),
            base ? base + 1 : file, line, msg);
}
