/*
 * log.h - the one logging macro family of libftrt (internal).
 *
 * FTRT_LOG=error|warn|info|debug (default warn) picks the level; messages go to stderr as
 * "ftrt[w<world rank>] LEVEL file:line: message". Thread-safe (one fprintf per line).
 * Every error-level message is also kept, per thread, for ftrt_last_error() (ftrt.h), whatever
 * the level.
 */
#ifndef FTRT_LOG_H
#define FTRT_LOG_H

enum { FTRT__LOG_ERROR = 0, FTRT__LOG_WARN = 1, FTRT__LOG_INFO = 2, FTRT__LOG_DEBUG = 3 };

/* Current level and the world rank printed in the prefix (-1 until known). */
extern int ftrt__log_level;
extern int ftrt__log_rank;

/* Prints the message when level <= ftrt__log_level; an error-level one is also recorded as the
 * calling thread's last error. */
void ftrt__log(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define FTRT__LOG(lvl, ...)                                                                    \
    do {                                                                                       \
        if ((lvl) <= ftrt__log_level) ftrt__log((lvl), __FILE__, __LINE__, __VA_ARGS__);       \
    } while (0)
#define ftrt_log_error(...) ftrt__log(FTRT__LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define ftrt_log_warn(...) FTRT__LOG(FTRT__LOG_WARN, __VA_ARGS__)
#define ftrt_log_info(...) FTRT__LOG(FTRT__LOG_INFO, __VA_ARGS__)
#define ftrt_log_debug(...) FTRT__LOG(FTRT__LOG_DEBUG, __VA_ARGS__)

#endif
