/*
 * mpi_types.c - the CPU plane's MPI datatypes and reductions for each ftrt_dtype and ftrt_op
 * (ftrt__mpi_reduction, comm/plane.h), used by the blocking collectives (comm/mpi_plane.c),
 * the overlapped ones (comm/async.c) and the CPU bucketer (comm/bucketer.c).
 *
 * float32 / float64 / int64 map to MPI's predefined types and operations. MPI has no 16-bit
 * float type, so bfloat16 and fp16 travel as MPI_UINT16_T and are reduced by user-defined
 * commutative operations (MPI_Op_create), created once per process on first use, whose
 * arithmetic is kernels/half.h's: each pairwise sum widened to float32, added and rounded to
 * nearest even (the correctly rounded 16-bit sum), min / max on the widened values, a NaN
 * result the canonical quiet NaN, so that the operation is bitwise commutative as MPI needs.
 */
#include <pthread.h>
#include <stdint.h>

#include "base/log.h"
#include "comm/plane.h"
#include "kernels/half.h"

void ftrt__h16_reduce(int dtype, int op, const void *in, void *inout, int len)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < len; i++) b[i] = ftrt__h16_op(dtype, op, a[i], b[i]);
}

#define H16_FN(name, dt, op)                                                                    \
    static void name(void *in, void *inout, int *len, MPI_Datatype *type)                       \
    {                                                                                          \
        (void)type;                                                                            \
        ftrt__h16_reduce(dt, op, in, inout, *len);                                             \
    }
H16_FN(bf16_sum, FTRT__K_BF16, FTRT__H_SUM)
H16_FN(bf16_min, FTRT__K_BF16, FTRT__H_MIN)
H16_FN(bf16_max, FTRT__K_BF16, FTRT__H_MAX)
H16_FN(fp16_sum, FTRT__K_F16, FTRT__H_SUM)
H16_FN(fp16_min, FTRT__K_F16, FTRT__H_MIN)
H16_FN(fp16_max, FTRT__K_F16, FTRT__H_MAX)

static MPI_User_function *const h16_fns[2][3] = {{bf16_sum, bf16_min, bf16_max},
                                                 {fp16_sum, fp16_min, fp16_max}};
static MPI_Op h16_ops[2][3];
static int h16_err; /* the MPI error of creating them, 0 when all exist */
static pthread_once_t h16_once = PTHREAD_ONCE_INIT;

/* Creates the six operations (never freed: MPI_Finalize releases them). */
static void h16_create(void)
{
    for (int d = 0; d < 2; d++)
        for (int o = 0; o < 3; o++) {
            int e = MPI_Op_create(h16_fns[d][o], 1 /* commutative */, &h16_ops[d][o]);
            if (e != MPI_SUCCESS && !h16_err) h16_err = e;
        }
}

int ftrt__mpi_reduction(int dtype, int op, MPI_Datatype *t, MPI_Op *o, size_t *esize)
{
    *t = MPI_DATATYPE_NULL;
    *o = MPI_OP_NULL;
    *esize = 0;
    if (op != FTRT_SUM && op != FTRT_MIN && op != FTRT_MAX) {
        ftrt_log_error("allreduce: unknown reduction op %d (FTRT_SUM, FTRT_MIN, FTRT_MAX)", op);
        return FTRT_EINVAL;
    }
    switch (dtype) {
    case FTRT_FLOAT32: *t = MPI_FLOAT; *esize = 4; break;
    case FTRT_FLOAT64: *t = MPI_DOUBLE; *esize = 8; break;
    case FTRT_INT64: *t = MPI_INT64_T; *esize = 8; break;
    case FTRT_BFLOAT16:
    case FTRT_FLOAT16: {
        pthread_once(&h16_once, h16_create);
        if (h16_err) {
            ftrt_log_error("allreduce: MPI_Op_create for the 16-bit reductions failed (%d)",
                           h16_err);
            return FTRT_EMPI;
        }
        *t = MPI_UINT16_T;
        *o = h16_ops[dtype == FTRT_FLOAT16][op];
        *esize = 2;
        return 0;
    }
    default:
        ftrt_log_error("allreduce: unknown dtype %d (FTRT_FLOAT32, FTRT_FLOAT64, FTRT_INT64, "
                       "FTRT_BFLOAT16, FTRT_FLOAT16)", dtype);
        return FTRT_EINVAL;
    }
    *o = op == FTRT_SUM ? MPI_SUM : op == FTRT_MIN ? MPI_MIN : MPI_MAX;
    return 0;
}

