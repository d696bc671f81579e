/* Join spike only (README.md here; docs/join.md): an LD_PRELOAD library for Open MPI 5.0.11's
 * `mpirun --dvm file:URI` (PRRTE 3.0.14's prterun joining a running prte DVM), which dies with
 * SIGSEGV in prte_ess_base_setup_signals: prun_common() no longer constructs the list
 * prte_ess_base_signals before appending to it (PRRTE commit 677979b, in v3.0.13; the crash is
 * openpmix/prrte#2364).  This wrapper runs pmix_list_t's constructors on the list once, then
 * calls PRRTE's own function.  The class layout below is pmix_class_t's of PMIx (name, parent,
 * construct, destruct, initialized, depth, construct array, destruct array, size).  A spike's
 * workaround, not something to ship.  Built by run.sh:
 *   gcc -shared -fPIC -o shim.so prterun_dvm_shim.c -Wl,-rpath,$PREFIX/lib/openmpi
 *       -L$PREFIX/lib/openmpi -l:libpmix.so.2 -l:libprrte.so.3 -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
typedef void (*ctor_t)(void *);
struct cls { const char *name; struct cls *parent; ctor_t c; ctor_t d; int initialized; int depth; ctor_t *carr; ctor_t *darr; size_t size; };
extern struct cls pmix_list_t_class;
extern char prte_ess_base_signals[];
extern void pmix_class_initialize(struct cls *);
int prte_ess_base_setup_signals(char *p)
{
    static int (*orig)(char *);
    static int done;
    if (!orig) orig = (int (*)(char *))dlsym(RTLD_NEXT, "prte_ess_base_setup_signals");
    if (!done) {
        done = 1;
        if (!pmix_list_t_class.initialized) pmix_class_initialize(&pmix_list_t_class);
        fprintf(stderr, "shim: constructing prte_ess_base_signals (class %s, %zu bytes)\n",
                pmix_list_t_class.name, pmix_list_t_class.size);
        for (ctor_t *f = pmix_list_t_class.carr; f && *f; f++) (*f)(prte_ess_base_signals);
    }
    return orig(p);
}
