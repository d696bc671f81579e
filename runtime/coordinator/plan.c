/* plan.c - the recovery plan's resume step and state source (pure; see coordinator.h). */
#include "runtime/coordinator/coordinator.h"

int ftrt__plan_compute(const int64_t *steps_done, const int *survivor, int n, int has_sharded,
                       int64_t last_committed, int64_t *resume, int *source, int64_t *ckpt)
{
    int64_t most = -1;
    int src = -1;
    for (int l = 0; l < n; l++)
        if (survivor[l] && steps_done[l] > most) {
            most = steps_done[l];
            src = l;
        }
    if (src < 0) return FTRT_EABORT;
    *source = src;
    if (has_sharded) {
        if (last_committed < 0) return FTRT_ENOCKPT;
        *resume = *ckpt = last_committed;
    } else {
        *resume = most;
        *ckpt = -1;
    }
    return 0;
}
