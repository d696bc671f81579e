/* log.c - stderr logging for libftrt; see log.h. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ftrt__log_level = FTRT__LOG_WARN;
int ftrt__log_rank = -1;

static const char *level_name(int level)
{
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    return (level >= 0 && level <= 3) ? names[level] : "?";
}

void ftrt__log(int level, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    fprintf(stderr, "ftrt[w%d] %s %s:%d: %s\n", ftrt__log_rank, level_name(level),
            base ? base + 1 : file, line, msg);
}
