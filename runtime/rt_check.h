/* rt_check.h — error handling for the CUDA runtime code: the runtime's status codes, and
 * macros that check every CUDA runtime / driver call and, on failure, fill the caller's
 * ms_error with the failing call, file and line and return (never exit): llm.c's cudaCheck
 * idea, as a status. A function that can fail takes `ms_error *err` as its last parameter,
 * as the library's functions do, and the macros use that `err`. Used by every runtime/
 * source. */
#ifndef MEMSIM_RT_CHECK_H
#define MEMSIM_RT_CHECK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "base/util.h"

typedef enum rt_status {
    RT_OK = 0,
    RT_ERR_CUDA,    /* a CUDA call failed: the ms_error names it */
    RT_ERR_NODEV,   /* no usable GPU or driver */
    RT_ERR_OOM,     /* device memory exhausted */
    RT_ERR_HOST,    /* host allocation or I/O failed */
    RT_ERR_INVALID  /* bad plan or argument */
} rt_status;

/* Fills err (NULL: nothing) with "file:line: call: message"; returns st. */
rt_status rt_fail(ms_error *err, rt_status st, const char *file, int line, const char *call,
                  const char *msg);

#ifdef __cplusplus
}
#endif

#define RT_CHECK(err, call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
    return rt_fail((err), e_ == cudaErrorMemoryAllocation ? RT_ERR_OOM : RT_ERR_CUDA, \
                   __FILE__, __LINE__, #call, cudaGetErrorString(e_)); } while (0)
#define RT_CHECK_GOTO(err, call, st, label) do { cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) { \
        st = rt_fail((err), RT_ERR_CUDA, __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
        goto label; } } while (0)
#define RT_CU(err, call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { \
    const char *s_ = "unknown"; cuGetErrorString(r_, &s_); \
    return rt_fail((err), r_ == CUDA_ERROR_OUT_OF_MEMORY ? RT_ERR_OOM : RT_ERR_CUDA, \
                   __FILE__, __LINE__, #call, s_); } } while (0)
#define RT_TRY(expr) do { rt_status s_ = (expr); if (s_ != RT_OK) return s_; } while (0)

#endif
