/* rt_nvml.c — NVML loaded with dlopen and called through the few functions declared here
 * (see rt_nvml.h). The declarations follow NVML's documented interface (nvml.h):
 * nvmlReturn_t is an int enum with NVML_SUCCESS = 0, nvmlDevice_t an opaque pointer,
 * nvmlClockType_t's NVML_CLOCK_SM = 1, powers in milliwatts, clocks in MHz. Used by the power
 * probe in runtime/probe.cu. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rt_nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

enum { NVML_SUCCESS = 0, NVML_CLOCK_SM = 1 };

typedef struct nvml_api {
    int (*init)(void);
    int (*shutdown)(void);
    int (*by_pci)(const char *pci, void **dev);
    int (*power_mw)(void *dev, unsigned *mw);
    int (*clock)(void *dev, int type, unsigned *mhz);
    int (*max_clock)(void *dev, int type, unsigned *mhz);
    int (*limit_mw)(void *dev, unsigned *mw);
} nvml_api;

struct rt_nvml {
    void *lib;
    void *dev;
    nvml_api f;
};

static int load_sym(void *lib, const char *name, void **slot, char *why, unsigned why_len)
{
    *slot = dlsym(lib, name);
    if (*slot) return 0;
    snprintf(why, why_len, "NVML has no %s", name);
    return -1;
}

static int load_api(rt_nvml *n, char *why, unsigned why_len)
{
    struct { const char *name; void **slot; } rows[] = {
        {"nvmlInit_v2", (void **)&n->f.init},
        {"nvmlShutdown", (void **)&n->f.shutdown},
        {"nvmlDeviceGetHandleByPciBusId_v2", (void **)&n->f.by_pci},
        {"nvmlDeviceGetPowerUsage", (void **)&n->f.power_mw},
        {"nvmlDeviceGetClockInfo", (void **)&n->f.clock},
        {"nvmlDeviceGetMaxClockInfo", (void **)&n->f.max_clock},
        {"nvmlDeviceGetEnforcedPowerLimit", (void **)&n->f.limit_mw},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        if (load_sym(n->lib, rows[i].name, rows[i].slot, why, why_len)) return -1;
    return 0;
}

int rt_nvml_new(const char *pci, rt_nvml **out, char *why, unsigned why_len)
{
    *out = NULL;
    rt_nvml *n = calloc(1, sizeof *n);
    if (!n) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        snprintf(why, why_len, "cannot load NVML (libnvidia-ml.so.1): %s", dlerror());
        free(n);
        return -1;
    }
    if (load_api(n, why, why_len)) {
        dlclose(n->lib);
        free(n);
        return -1;
    }
    int r = n->f.init();
    if (r != NVML_SUCCESS) {
        snprintf(why, why_len, "nvmlInit failed (NVML error %d)", r);
        dlclose(n->lib);
        free(n);
        return -1;
    }
    if ((r = n->f.by_pci(pci, &n->dev)) != NVML_SUCCESS) {
        snprintf(why, why_len, "NVML does not know the device at PCI %s (NVML error %d)", pci, r);
        n->f.shutdown();
        dlclose(n->lib);
        free(n);
        return -1;
    }
    *out = n;
    return 0;
}

void rt_nvml_free(rt_nvml *n)
{
    if (!n) return;
    n->f.shutdown();
    dlclose(n->lib);
    free(n);
}

int rt_nvml_power_w(rt_nvml *n, double *w)
{
    unsigned mw = 0;
    if (n->f.power_mw(n->dev, &mw) != NVML_SUCCESS) return -1;
    *w = mw / 1000.0;
    return 0;
}

int rt_nvml_sm_clock_mhz(rt_nvml *n, double *mhz)
{
    unsigned v = 0;
    if (n->f.clock(n->dev, NVML_CLOCK_SM, &v) != NVML_SUCCESS) return -1;
    *mhz = v;
    return 0;
}

int rt_nvml_sm_clock_max_mhz(rt_nvml *n, double *mhz)
{
    unsigned v = 0;
    if (n->f.max_clock(n->dev, NVML_CLOCK_SM, &v) != NVML_SUCCESS) return -1;
    *mhz = v;
    return 0;
}

int rt_nvml_power_limit_w(rt_nvml *n, double *w)
{
    unsigned mw = 0;
    if (n->f.limit_mw(n->dev, &mw) != NVML_SUCCESS) return -1;
    *w = mw / 1000.0;
    return 0;
}
