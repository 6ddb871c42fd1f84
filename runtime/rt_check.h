/* rt_check.h — error handling for the CUDA runtime code: a status enum, the last error's text,
 * and macros that check every CUDA runtime / driver call and return (never exit) with the
 * failing call, file and line recorded (llm.c's cudaCheck idea, as a status). Used by every
 * runtime/ source. */
#ifndef MEMSIM_RT_CHECK_H
#define MEMSIM_RT_CHECK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rt_status {
    RT_OK = 0,
    RT_ERR_CUDA,    /* a CUDA call failed: see rt_last_error() */
    RT_ERR_NODEV,   /* no usable GPU or driver */
    RT_ERR_OOM,     /* device memory exhausted */
    RT_ERR_HOST,    /* host allocation or I/O failed */
    RT_ERR_INVALID  /* bad plan or argument */
} rt_status;

/* Records "file:line: call: message" as the last error; returns st. */
rt_status rt_set_error(rt_status st, const char *file, int line, const char *call,
                       const char *msg);
const char *rt_last_error(void);

#ifdef __cplusplus
}
#endif

#define RT_CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
    return rt_set_error(e_ == cudaErrorMemoryAllocation ? RT_ERR_OOM : RT_ERR_CUDA, \
                        __FILE__, __LINE__, #call, cudaGetErrorString(e_)); } while (0)
#define RT_CHECK_GOTO(call, st, label) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    st = rt_set_error(RT_ERR_CUDA, __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    goto label; } } while (0)
#define RT_CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { \
    const char *s_ = "unknown"; cuGetErrorString(r_, &s_); \
    return rt_set_error(r_ == CUDA_ERROR_OUT_OF_MEMORY ? RT_ERR_OOM : RT_ERR_CUDA, \
                        __FILE__, __LINE__, #call, s_); } } while (0)
#define RT_TRY(expr) do { rt_status s_ = (expr); if (s_ != RT_OK) return s_; } while (0)

#endif
