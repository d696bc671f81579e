/* Uses the installed public header and library without MPI: config defaults and error names. */
#include <ftrt.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    ftrt_config cfg;
    if (ftrt_config_init(&cfg, sizeof cfg) != 0 || cfg.heartbeat_ms <= 0) return 1;
    if (strcmp(ftrt_err_name(FTRT_ERECOVER), "FTRT_ERECOVER") != 0) return 1;
    printf("consumer: heartbeat %d ms, %s\n", cfg.heartbeat_ms, ftrt_strerror(FTRT_ENOSPARE));
    return 0;
}
