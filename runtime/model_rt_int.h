/* model_rt_int.h — internal to the GPU model: the layer shape that the model and benchmark
 * (model_rt.c) and the op dispatcher (model_rt_ops.c) share, its check, and the dispatcher's
 * "bad trace" failure that the schedule walker (model_rt_walk.c) reports with too. Not an
 * interface: model_rt.h, model_rt_ops.h and model_rt_walk.h are what the rest of the runtime
 * calls. */
#ifndef MEMSIM_MODEL_RT_INT_H
#define MEMSIM_MODEL_RT_INT_H

#include "runtime/model_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct shape {
    size_t T, B, S, h, H, D, f;
    float eps;
} shape;

/* RT_ERR_INVALID unless the shape is one the kernels run (model_rt.c). */
rt_status mrt_shape_check(const shape *z, int vocab, ms_error *err);
/* A trace the dispatcher cannot run: RT_ERR_INVALID, "--math real" and why
 * (model_rt_ops.c). */
rt_status mrt_bad_trace(const char *why, ms_error *err);

#ifdef __cplusplus
}
#endif

#endif
