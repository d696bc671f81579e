/*
 * nccl_config.c - the NCCL plane's communicator settings (libftrt_gpu only): FTRT_NCCL_CTA_POLICY,
 * FTRT_NCCL_MIN_CTAS and FTRT_NCCL_MAX_CTAS (base/config.c) into ncclConfig_t's CTAPolicy,
 * minCTAs and maxCTAs, where the build's nccl.h has them (docs/collectives.md "NCCL plane
 * settings"; NCCL user guide, "NCCL API Supported Flags" and "Types").
 */
#include <nccl.h>

#include "base/log.h"
#include "comm/nccl_plane.h"

/* The CTA settings of ncclConfig_t, by the NCCL version of the build: CTAPolicy arrived in 2.27
 * (NCCL_CTA_POLICY_DEFAULT / _EFFICIENCY), NCCL_CTA_POLICY_ZERO later (2.27.5's docs lack it,
 * 2.28.9's nccl.h has it), minCTAs / maxCTAs in 2.17. */
#if defined(NCCL_CTA_POLICY_DEFAULT) && defined(NCCL_CTA_POLICY_EFFICIENCY)
#define HAVE_NCCL_CTA_POLICY 1
#else
#define HAVE_NCCL_CTA_POLICY 0
#endif
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 17, 0)
#define HAVE_NCCL_CTAS 1
#else
#define HAVE_NCCL_CTAS 0
#endif

/* NCCL's CTAPolicy value for FTRT_NCCL_CTA_* p (not UNSET), or -1 when this NCCL lacks it. */
static int cta_policy_value(int p)
{
#if HAVE_NCCL_CTA_POLICY
    if (p == FTRT_NCCL_CTA_DEFAULT) return NCCL_CTA_POLICY_DEFAULT;
    if (p == FTRT_NCCL_CTA_EFFICIENCY) return NCCL_CTA_POLICY_EFFICIENCY;
#if defined(NCCL_CTA_POLICY_ZERO)
    if (p == FTRT_NCCL_CTA_ZERO) return NCCL_CTA_POLICY_ZERO;
#endif
#endif
    (void)p;
    return -1;
}

/* Sets the plane's FTRT_NCCL_CTA_POLICY / FTRT_NCCL_MIN_CTAS / FTRT_NCCL_MAX_CTAS into cfg;
 * unset ones stay NCCL_CONFIG_UNDEF_INT (NCCL's own default). 0, or FTRT_ENOTSUP (logged,
 * naming the setting) when the build's NCCL lacks the field or the policy. */
int ftrt__nccl_apply_settings(const ftrt__plane *pl, ncclConfig_t *cfg)
{
    static const char *const names[] = {"unset", "default", "efficiency", "zero"};
    if (pl->nccl_cta_policy > FTRT_NCCL_CTA_UNSET) {
        int v = cta_policy_value(pl->nccl_cta_policy);
        if (v < 0) {
            ftrt_log_error("FTRT_NCCL_CTA_POLICY=%s: the NCCL this library was built with "
                           "(%d) lacks that CTA policy (CTAPolicy: NCCL 2.27+; zero: where nccl.h "
                           "defines NCCL_CTA_POLICY_ZERO)",
                           names[pl->nccl_cta_policy & 3], NCCL_VERSION_CODE);
            return FTRT_ENOTSUP;
        }
#if HAVE_NCCL_CTA_POLICY
        cfg->CTAPolicy = v;
#endif
    }
    if (pl->nccl_min_ctas > 0 || pl->nccl_max_ctas > 0) {
#if HAVE_NCCL_CTAS
        if (pl->nccl_min_ctas > 0) cfg->minCTAs = pl->nccl_min_ctas;
        if (pl->nccl_max_ctas > 0) cfg->maxCTAs = pl->nccl_max_ctas;
#else
        ftrt_log_error("FTRT_NCCL_MIN_CTAS / FTRT_NCCL_MAX_CTAS: the NCCL this library was "
                       "built with (%d) has no minCTAs / maxCTAs (NCCL 2.17+)", NCCL_VERSION_CODE);
        return FTRT_ENOTSUP;
#endif
    }
    (void)cfg;
    return 0;
}
