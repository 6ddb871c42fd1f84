/* rt_nvml.h — the GPU's board power and SM clock read through NVML, loaded with dlopen so
 * that the runtime needs no NVML at build time (runtime/rt_nvml.c). Used by the power probe
 * (`memsim probe --power`, runtime/probe.cu). */
#ifndef MEMSIM_RT_NVML_H
#define MEMSIM_RT_NVML_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_nvml rt_nvml;

/* Opens NVML (libnvidia-ml.so.1) and the device of PCI bus id pci ("0000:19:00.0", as
 * cudaDeviceGetPCIBusId writes it). 0 on success; else -1 and why[] says what failed. */
int rt_nvml_new(const char *pci, rt_nvml **out, char *why, unsigned why_len);
void rt_nvml_free(rt_nvml *n);

/* Board power draw, W (NVML's power usage: on this generation of GPU an average over the
 * driver's last second, so a reading follows a change of load with a lag). */
int rt_nvml_power_w(rt_nvml *n, double *w);
/* The SM clock now, and its maximum, MHz. */
int rt_nvml_sm_clock_mhz(rt_nvml *n, double *mhz);
int rt_nvml_sm_clock_max_mhz(rt_nvml *n, double *mhz);
/* The power limit the driver enforces, W. */
int rt_nvml_power_limit_w(rt_nvml *n, double *w);

#ifdef __cplusplus
}
#endif

#endif
