/* rt_nccl.c — NCCL loaded with dlopen and called through the subset of its C API declared
 * here (see rt_nccl.h). The declarations follow NCCL's documented interface (nccl.h of NCCL
 * 2.x: ncclResult_t, ncclDataType_t and ncclRedOp_t are C enums, ncclComm_t an opaque
 * pointer, ncclUniqueId a struct of 128 bytes passed by value). Used by the runtime's
 * multi-GPU code and its tests. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rt_nccl.h"

#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- NCCL's interface, as documented ---- */

typedef int nccl_result;               /* ncclResult_t: ncclSuccess = 0 */
enum { NCCL_SUCCESS = 0, NCCL_IN_PROGRESS = 7 };
/* ncclDataType_t: ncclUint8 = 1, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 */
enum { NCCL_UINT8 = 1, NCCL_FLOAT32 = 7, NCCL_FLOAT64 = 8, NCCL_BFLOAT16 = 9 };
enum { NCCL_SUM = 0 };                 /* ncclRedOp_t: ncclSum */
typedef struct nccl_uid {
    char internal[RT_NCCL_ID_BYTES];
} nccl_uid;

typedef struct nccl_api {
    nccl_result (*get_version)(int *version);
    nccl_result (*get_unique_id)(nccl_uid *id);
    nccl_result (*comm_init_rank)(void **comm, int nranks, nccl_uid id, int rank);
    nccl_result (*comm_init_all)(void **comms, int ndev, const int *devlist);
    nccl_result (*comm_destroy)(void *comm);
    nccl_result (*comm_abort)(void *comm);
    nccl_result (*comm_get_async_error)(void *comm, nccl_result *async);
    const char *(*get_error_string)(nccl_result r);
    nccl_result (*all_gather)(const void *send, void *recv, size_t sendcount, int type,
                              void *comm, void *stream);
    nccl_result (*reduce_scatter)(const void *send, void *recv, size_t recvcount, int type,
                                  int op, void *comm, void *stream);
    nccl_result (*all_reduce)(const void *send, void *recv, size_t count, int type, int op,
                              void *comm, void *stream);
    nccl_result (*send)(const void *buf, size_t count, int type, int peer, void *comm,
                        void *stream);
    nccl_result (*recv)(void *buf, size_t count, int type, int peer, void *comm, void *stream);
    nccl_result (*group_start)(void);
    nccl_result (*group_end)(void);
} nccl_api;

struct rt_nccl {
    void *lib;
    char path[4096];
    int version;
    nccl_api f;
};

/* One row per symbol: its name, where its pointer goes, whether the run needs it. */
typedef struct sym_row {
    const char *name;
    size_t offset;
    int required;
} sym_row;

#define SYM(n, field, req) {n, offsetof(nccl_api, field), req}
static const sym_row syms[] = {
    SYM("ncclGetVersion", get_version, 1),
    SYM("ncclGetUniqueId", get_unique_id, 1),
    SYM("ncclCommInitRank", comm_init_rank, 1),
    SYM("ncclCommInitAll", comm_init_all, 1),
    SYM("ncclCommDestroy", comm_destroy, 1),
    SYM("ncclCommAbort", comm_abort, 1),
    SYM("ncclCommGetAsyncError", comm_get_async_error, 0),
    SYM("ncclGetErrorString", get_error_string, 1),
    SYM("ncclAllGather", all_gather, 1),
    SYM("ncclReduceScatter", reduce_scatter, 1),
    SYM("ncclAllReduce", all_reduce, 1),
    SYM("ncclSend", send, 1),
    SYM("ncclRecv", recv, 1),
    SYM("ncclGroupStart", group_start, 1),
    SYM("ncclGroupEnd", group_end, 1),
};

/* NCCL 2.10: bf16 reductions; send/receive came with 2.7. */
#define NCCL_MIN_VERSION 21000

/* ---- the environment ---- */

static const char *const safe_env[][2] = {
    {"NCCL_NVLS_ENABLE", "0"},
    {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
    {"NVSHMEM_DISABLE_NVLS", "1"},
};

/* NCCL's other settings the runtime chooses when the user has not: connect every algorithm's
 * peers when the communicator is made (NCCL 2.22 connects at first use), so that NCCL's
 * buffers exist before the allocator's capacity is measured. */
static const char *const default_env[][2] = {
    {"NCCL_RUNTIME_CONNECT", "0"},
};

int rt_nccl_safe_env(char *note, size_t note_len)
{
    int changed = 0;
    size_t used = 0;
    if (note && note_len) note[0] = 0;
    for (size_t i = 0; i < sizeof safe_env / sizeof *safe_env; i++) {
        const char *now = getenv(safe_env[i][0]);
        if (now && !strcmp(now, safe_env[i][1])) continue;
        if (now && note && used < note_len) {
            int w = snprintf(note + used, note_len - used, "%s%s=%s replaced by %s",
                             used ? "; " : "", safe_env[i][0], now, safe_env[i][1]);
            if (w > 0) used += (size_t)w;
        }
        setenv(safe_env[i][0], safe_env[i][1], 1);
        changed++;
    }
    for (size_t i = 0; i < sizeof default_env / sizeof *default_env; i++)
        setenv(default_env[i][0], default_env[i][1], 0);
    return changed;
}

/* ---- finding the library ---- */

static void tried_add(char *tried, size_t n, const char *fmt, const char *a, const char *b)
{
    size_t used = strlen(tried);
    if (used + 4 >= n) return;
    snprintf(tried + used, n - used, used ? "; " : "");
    used = strlen(tried);
    snprintf(tried + used, n - used, fmt, a, b);
}

static void *open_at(const char *path, char *tried, size_t n)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        tried_add(tried, n, "%s (%s)", path, e ? e : "not loadable");
    }
    return h;
}

/* The folder of PyTorch's NCCL wheel as python3 reports it (nvidia.nccl), or "" */
static void python_nccl_dir(char *dir, size_t n)
{
    dir[0] = 0;
    FILE *p = popen("python3 -c \"import nvidia.nccl as m, os; print(os.path.dirname(m.__file__) "
                    "if getattr(m, '__file__', None) else list(m.__path__)[0])\" 2>/dev/null",
                    "r");
    if (!p) return;
    if (!fgets(dir, (int)n, p)) dir[0] = 0;
    pclose(p);
    dir[strcspn(dir, "\r\n")] = 0;
}

/* Where pip puts the nvidia-nccl wheel beside PyTorch. */
static const char *const site_globs[] = {
    "/opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
    "/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
    "/usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
    "/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2",
    "/usr/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
};

static void *open_glob(const char *pattern, char *path, size_t pn, char *tried, size_t n)
{
    glob_t g;
    void *h = NULL;
    if (glob(pattern, 0, NULL, &g) != 0) {
        tried_add(tried, n, "%s%s", pattern, " (no match)");
        return NULL;
    }
    for (size_t i = 0; !h && i < g.gl_pathc; i++)
        if ((h = open_at(g.gl_pathv[i], tried, n))) snprintf(path, pn, "%s", g.gl_pathv[i]);
    globfree(&g);
    return h;
}

static void *find_library(char *path, size_t pn, ms_error *err, rt_status *st)
{
    char tried[3072] = "";
    const char *env = getenv("MEMSIM_NCCL");
    *st = RT_ERR_NODEV;
    if (env && *env) {
        void *h = open_at(env, tried, sizeof tried);
        if (h) snprintf(path, pn, "%s", env);
        else ms_fail(err, MS_ERR_NOTFOUND, "NCCL: MEMSIM_NCCL names %s", tried);
        return h;
    }
    tried_add(tried, sizeof tried, "%s%s", "MEMSIM_NCCL", " (not set)");
    void *h = open_at("libnccl.so.2", tried, sizeof tried);
    if (h) {
        snprintf(path, pn, "libnccl.so.2 (the loader's path)");
        return h;
    }
    char dir[2048], lib[2100];
    python_nccl_dir(dir, sizeof dir);
    if (dir[0]) {
        snprintf(lib, sizeof lib, "%s/lib/libnccl.so.2", dir);
        if ((h = open_at(lib, tried, sizeof tried))) {
            snprintf(path, pn, "%s", lib);
            return h;
        }
    } else {
        tried_add(tried, sizeof tried, "%s%s", "python3's nvidia.nccl", " (no such module)");
    }
    const char *venv = getenv("VIRTUAL_ENV");
    if (venv && *venv) {
        snprintf(lib, sizeof lib, "%s/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
                 venv);
        if ((h = open_glob(lib, path, pn, tried, sizeof tried))) return h;
    }
    for (size_t i = 0; i < sizeof site_globs / sizeof *site_globs; i++)
        if ((h = open_glob(site_globs[i], path, pn, tried, sizeof tried))) return h;
    ms_fail(err, MS_ERR_NOTFOUND, "NCCL not found; tried: %s. Set MEMSIM_NCCL to the path of "
            "libnccl.so.2", tried);
    return NULL;
}

static rt_status bind(rt_nccl *n, ms_error *err)
{
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
        void *p = dlsym(n->lib, syms[i].name);
        if (!p && syms[i].required) {
            char m[160];
            snprintf(m, sizeof m, "has no symbol %s, which the runtime calls", syms[i].name);
            return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, n->path, m);
        }
        /* POSIX: a data pointer from dlsym converts to the function it names */
        memcpy((char *)&n->f + syms[i].offset, &p, sizeof p);
    }
    if (n->f.get_version(&n->version) != NCCL_SUCCESS) n->version = 0;
    if (n->version < NCCL_MIN_VERSION) {
        char m[160];
        snprintf(m, sizeof m, "NCCL version code %d is older than 2.10 (code %d), which the "
                 "runtime needs", n->version, NCCL_MIN_VERSION);
        return rt_fail(err, RT_ERR_INVALID, __FILE__, __LINE__, n->path, m);
    }
    return RT_OK;
}

rt_status rt_nccl_load(rt_nccl **out, ms_error *err)
{
    *out = NULL;
    rt_nccl_safe_env(NULL, 0);
    rt_nccl *n = calloc(1, sizeof *n);
    if (!n) return rt_fail(err, RT_ERR_HOST, __FILE__, __LINE__, "calloc", "out of memory");
    rt_status st;
    n->lib = find_library(n->path, sizeof n->path, err, &st);
    if (!n->lib) {
        free(n);
        return st;
    }
    if ((st = bind(n, err)) != RT_OK) {
        rt_nccl_free(n);
        return st;
    }
    *out = n;
    return RT_OK;
}

/* The library stays mapped: NCCL's own threads may outlive the handle (ncclGetUniqueId
 * starts a bootstrap thread that waits for the ranks of its id, which need never come), and
 * unmapping the code under them crashes the process. */
void rt_nccl_free(rt_nccl *n)
{
    free(n);
}

const char *rt_nccl_path(const rt_nccl *n) { return n->path; }
int rt_nccl_version(const rt_nccl *n) { return n->version; }

size_t rt_nccl_type_bytes(rt_nccl_type t)
{
    switch (t) {
    case RN_BF16: return 2;
    case RN_F32: return 4;
    case RN_F64: return 8;
    default: return 1;
    }
}

static int nccl_type(rt_nccl_type t)
{
    switch (t) {
    case RN_BF16: return NCCL_BFLOAT16;
    case RN_F32: return NCCL_FLOAT32;
    case RN_F64: return NCCL_FLOAT64;
    default: return NCCL_UINT8;
    }
}

/* ---- the calls ---- */

static rt_status check(rt_nccl *n, nccl_result r, const char *call, ms_error *err)
{
    if (r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS) return RT_OK;
    const char *m = n->f.get_error_string ? n->f.get_error_string(r) : NULL;
    char b[200];
    snprintf(b, sizeof b, "NCCL error %d: %s", r, m ? m : "(no message)");
    return rt_fail(err, RT_ERR_CUDA, __FILE__, __LINE__, call, b);
}

rt_status rt_nccl_unique_id(rt_nccl *n, rt_nccl_id *id, ms_error *err)
{
    nccl_uid u;
    memset(&u, 0, sizeof u);
    rt_status st = check(n, n->f.get_unique_id(&u), "ncclGetUniqueId", err);
    memcpy(id->bytes, u.internal, sizeof id->bytes);
    return st;
}

rt_status rt_nccl_comm_init(rt_nccl *n, int nranks, const rt_nccl_id *id, int rank,
                            void **comm, ms_error *err)
{
    nccl_uid u;
    memcpy(u.internal, id->bytes, sizeof u.internal);
    *comm = NULL;
    return check(n, n->f.comm_init_rank(comm, nranks, u, rank), "ncclCommInitRank", err);
}

rt_status rt_nccl_comm_init_all(rt_nccl *n, int ndev, const int *devices, void **comms,
                                ms_error *err)
{
    return check(n, n->f.comm_init_all(comms, ndev, devices), "ncclCommInitAll", err);
}

void rt_nccl_comm_destroy(rt_nccl *n, void *comm)
{
    if (comm) n->f.comm_destroy(comm);
}

void rt_nccl_comm_abort(rt_nccl *n, void *comm)
{
    if (comm) n->f.comm_abort(comm);
}

rt_status rt_nccl_all_gather(rt_nccl *n, const void *send, void *recv, size_t send_bytes,
                             void *comm, void *s, ms_error *err)
{
    return check(n, n->f.all_gather(send, recv, send_bytes, NCCL_UINT8, comm, s),
                 "ncclAllGather", err);
}

rt_status rt_nccl_reduce_scatter(rt_nccl *n, const void *send, void *recv, size_t recv_count,
                                 rt_nccl_type t, void *comm, void *s, ms_error *err)
{
    return check(n, n->f.reduce_scatter(send, recv, recv_count, nccl_type(t), NCCL_SUM, comm, s),
                 "ncclReduceScatter", err);
}

rt_status rt_nccl_all_reduce(rt_nccl *n, const void *send, void *recv, size_t count,
                             rt_nccl_type t, void *comm, void *s, ms_error *err)
{
    return check(n, n->f.all_reduce(send, recv, count, nccl_type(t), NCCL_SUM, comm, s),
                 "ncclAllReduce", err);
}

rt_status rt_nccl_send(rt_nccl *n, const void *buf, size_t bytes, int peer, void *comm, void *s,
                       ms_error *err)
{
    return check(n, n->f.send(buf, bytes, NCCL_UINT8, peer, comm, s), "ncclSend", err);
}

rt_status rt_nccl_recv(rt_nccl *n, void *buf, size_t bytes, int peer, void *comm, void *s,
                       ms_error *err)
{
    return check(n, n->f.recv(buf, bytes, NCCL_UINT8, peer, comm, s), "ncclRecv", err);
}

rt_status rt_nccl_group_start(rt_nccl *n, ms_error *err)
{
    return check(n, n->f.group_start(), "ncclGroupStart", err);
}

rt_status rt_nccl_group_end(rt_nccl *n, ms_error *err)
{
    return check(n, n->f.group_end(), "ncclGroupEnd", err);
}

rt_status rt_nccl_async_error(rt_nccl *n, void *comm, ms_error *err)
{
    if (!n->f.comm_get_async_error || !comm) return RT_OK;
    nccl_result a = NCCL_SUCCESS;
    rt_status st = check(n, n->f.comm_get_async_error(comm, &a), "ncclCommGetAsyncError", err);
    if (st != RT_OK) return st;
    return check(n, a, "a collective of the communicator (asynchronous error)", err);
}
