/* test_import.c — unit tests of the PyTorch snapshot importer (traces/import_pytorch.c):
 * the hand-made fixture tests/fixtures/synthetic_snapshot.json imports to the expected
 * records, streams, warnings and allocator side information; the wrapper form returns
 * memory_stats; malformed and hostile inputs give FILE:LINE:COLUMN messages. TAP output. */
#define _POSIX_C_SOURCE 200809L
#include "traces/import_pytorch.h"
#include "tests/tap.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[256];

static const char *fixture_path(void)
{
    static char p[1024];
    const char *src = getenv("srcdir");
    snprintf(p, sizeof p, "%s/tests/fixtures/synthetic_snapshot.json", src ? src : ".");
    return p;
}

static const char *tmp_path(const char *name)
{
    static char p[2][512];
    static int k;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

static int write_file(const char *path, const char *text, int gz)
{
    if (gz) {
        gzFile g = gzopen(path, "wb");
        if (!g) return -1;
        int ok = gzwrite(g, text, (unsigned)strlen(text)) == (int)strlen(text);
        return gzclose(g) == Z_OK && ok ? 0 : -1;
    }
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Imports text from a buffer named "bad.json"; returns the status and leaves the message. */
static ms_status load_text(const char *text, const imp_options *opt, imp_result *res,
                           ms_error *err)
{
    trace_t *t = NULL;
    ms_error_clear(err);
    ms_status st = imp_pytorch_load_buffer("bad.json", text, strlen(text), opt, &t, res, err);
    trace_free(t);
    return st;
}

static int rec_is_alloc(const trace_rec *r, uint64_t id, uint64_t bytes, int32_t stream)
{
    return r && r->type == TR_ALLOC && r->u.alloc.id == id && r->u.alloc.bytes == bytes &&
           r->u.alloc.stream == stream && r->u.alloc.cls == TC_OTHER && r->u.alloc.layer == -1 &&
           r->u.alloc.tok_scaled == 0 && r->u.alloc.producer == -1 && r->u.alloc.name[0] == 0;
}

static int rec_is_free(const trace_rec *r, uint64_t id)
{
    return r && r->type == TR_FREE && r->u.free_id == id;
}

static int meta_is(const trace_t *t, const char *key, const char *want)
{
    const char *v = trace_get_meta(t, key);
    if (!v || strcmp(v, want) != 0) {
        TAP_NOTE("meta %s = %s (want %s)", key, v ? v : "(absent)", want);
        return 0;
    }
    return 1;
}

static void test_fixture(void)
{
    trace_t *t = NULL;
    imp_result r;
    ms_error err;
    ms_error_clear(&err);
    ms_status st = imp_pytorch_load(fixture_path(), NULL, &t, &r, &err);
    TAP_OK(st == MS_OK && t, "fixture imports (%s)", st ? err.msg : "ok");
    if (!t) return;
    TAP_OK(r.device == 1 && r.devices == 3, "default device is the first with entries (%d of %d)",
           r.device, r.devices);
    TAP_OK(trace_count(t) == 6, "6 records (got %zu)", trace_count(t));
    TAP_OK(rec_is_alloc(trace_get(t, 0), 1, 4000000, 0) &&
           rec_is_alloc(trace_get(t, 1), 2, 1000, 0) &&
           rec_is_alloc(trace_get(t, 2), 3, 500, 1),
           "allocs carry requested bytes, class other, layer -1, stream numbers");
    TAP_OK(rec_is_free(trace_get(t, 3), 1) && rec_is_alloc(trace_get(t, 4), 4, 2000000, 0) &&
           rec_is_free(trace_get(t, 5), 4),
           "free_completed frees; a reused address gets a fresh id");
    TAP_OK(r.streams == 2 && r.stream_values[0] == 0 && r.stream_values[1] == 94000000000000LL,
           "two streams numbered in order of first appearance");
    TAP_OK(r.unknown_frees == 1 && r.frees == 2 && r.allocs == 4,
           "free of an unknown address is a warning and dropped");
    TAP_OK(r.live_at_end == 2 && r.pending_frees == 1 && r.free_requested == 2,
           "live at end 2, one free requested but never completed");
    TAP_OK(r.segments == 3 && r.segment_sizes[0] == 20971520 && r.segment_sizes[1] == 2097152 &&
           r.segment_sizes[2] == 20971520 && r.segment_frees == 1,
           "segment_alloc sizes in order");
    TAP_OK(r.segment_addrs && r.segment_addrs[0] == 139637976727552ULL &&
           r.segment_addrs[1] == 139638245163008ULL && r.segment_addrs[2] == 139638513598464ULL &&
           meta_is(t, "pytorch.segment_allocs.0",
                   "0x7f0000000000:20971520,0x7f0010000000:2097152,0x7f0020000000:20971520") &&
           !trace_get_meta(t, "pytorch.segment_allocs.1"),
           "segment_alloc addresses kept, and written as meta pytorch.segment_allocs.0");
    TAP_OK(r.peak_reserved_bytes == 44040192 && r.reserved_start_bytes == 0 &&
           r.end_reserved_bytes == 23068672,
           "peak reserved 44040192 (got %llu), start 0, end 23068672",
           (unsigned long long)r.peak_reserved_bytes);
    TAP_OK(r.ooms == 1 && r.other_actions == 1 && r.entries == 15,
           "oom counted, snapshot action skipped, 15 entries");
    TAP_OK(r.peak_requested_bytes == 4001500, "peak requested bytes 4001500");
    TAP_OK((r.has & IMP_HAS_TIME) && r.first_time_us == 1000 && r.last_time_us == 1140,
           "time_us range");
    TAP_OK(meta_is(t, "source", "pytorch-snapshot") && meta_is(t, "pytorch.segments", "3") &&
           meta_is(t, "pytorch.peak_reserved_bytes", "44040192") &&
           meta_is(t, "pytorch.segment_sizes", "20971520,2097152,20971520") &&
           meta_is(t, "pytorch.streams", "0,94000000000000") &&
           meta_is(t, "pytorch.unknown_frees", "1"),
           "meta lines present");
    TAP_OK(!(r.has & (IMP_HAS_STATS_RESERVED_PEAK | IMP_HAS_STATS_SEGMENTS)),
           "plain snapshot has no memory_stats");
    imp_result_release(&r);
    trace_free(t);

    /* explicit device: device 2 has one alloc and 2 MiB of segments from before the trace */
    imp_options o;
    imp_options_init(&o);
    o.device = 2;
    st = imp_pytorch_load(fixture_path(), &o, &t, &r, &err);
    TAP_OK(st == MS_OK && trace_count(t) == 1 && rec_is_alloc(trace_get(t, 0), 1, 4096, 0) &&
           r.reserved_start_bytes == 2097152 && r.peak_reserved_bytes == 2097152,
           "device 2: one alloc, reserved 2 MiB held from before recording");
    imp_result_release(&r);
    trace_free(t);
    o.device = 7;
    st = imp_pytorch_load(fixture_path(), &o, &t, &r, &err);
    TAP_OK(st == MS_ERR_INVALID && t == NULL && strstr(err.msg, "device 7"),
           "missing device is an error: %s", err.msg);
}

static void test_write_and_gzip(void)
{
    ms_error err;
    imp_result r;
    const char *out = tmp_path("out.trace");
    ms_status st = imp_pytorch_import(fixture_path(), out, NULL, &r, &err);
    TAP_OK(st == MS_OK, "import to a trace file (%s)", st ? err.msg : "ok");
    imp_result_release(&r);
    trace_t *back = NULL;
    st = trace_load(out, &back, &err);
    TAP_OK(st == MS_OK && trace_count(back) == 6 && meta_is(back, "pytorch.segments", "3") &&
           rec_is_alloc(trace_get(back, 2), 3, 500, 1),
           "written trace reads back (%s)", st ? err.msg : "ok");
    trace_free(back);
    trace_check_report rep;
    st = trace_check_file(out, stderr, 10, &rep, &err);
    TAP_OK(st == MS_OK && rep.errors == 0 && rep.live_at_end == 2,
           "written trace passes the checker");
    unlink(out);

    /* the same fixture gzip-compressed */
    char *text;
    size_t len;
    st = ms_read_all(fixture_path(), 1 << 20, &text, &len, &err);
    const char *gz = tmp_path("snap.json.gz");
    int w = st == MS_OK ? write_file(gz, text, 1) : -1;
    free(text);
    trace_t *t = NULL;
    st = w == 0 ? imp_pytorch_load(gz, NULL, &t, &r, &err) : MS_ERR_IO;
    TAP_OK(st == MS_OK && trace_count(t) == 6 && r.segments == 3, "gzip input imports");
    if (st == MS_OK) imp_result_release(&r);
    trace_free(t);

    /* size bound: refused with a clear message, plain and gzip */
    imp_options o;
    imp_options_init(&o);
    o.max_file_bytes = 1000;
    st = imp_pytorch_load(fixture_path(), &o, &t, &r, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "larger than the import limit of 1000 B"),
           "too large plain file refused as bad input, naming the limit: %s", err.msg);
    st = imp_pytorch_load(gz, &o, &t, &r, &err);
    TAP_OK(st == MS_ERR_INVALID && strstr(err.msg, "after decompression") &&
           strstr(err.msg, "1000 B"),
           "too large gzip content refused as bad input, naming the limit: %s", err.msg);
    unlink(gz);
    st = imp_pytorch_load(tmp_path("does-not-exist.json"), NULL, &t, &r, &err);
    TAP_OK(st == MS_ERR_IO && t == NULL, "missing file: %s", err.msg);
}

static const char *WRAPPER =
    "{\"snapshot\": {\"segments\": [], \"device_traces\": [[\n"
    "  {\"action\": \"segment_alloc\", \"addr\": 4096, \"size\": 2097152, \"stream\": 0},\n"
    "  {\"action\": \"alloc\", \"addr\": 4096, \"size\": 100, \"stream\": 0},\n"
    "  {\"action\": \"free_completed\", \"addr\": 4096, \"size\": 100, \"stream\": 0}]]},\n"
    " \"memory_stats\": {\"active.all.peak\": 3, \"allocated_bytes.all.peak\": 512,\n"
    "   \"num_alloc_retries\": 0, \"reserved_bytes.all.peak\": 2097152,\n"
    "   \"segment.all.allocated\": 1},\n"
    " \"meta\": {\"torch_version\": \"2.11.0+cu128\", \"device_name\": \"NVIDIA H100 80GB HBM3\","
    " \"mode\": \"plain\", \"layers\": 4, \"dims\": {\"nested\": 1}, \"bad key\": 1}}\n";

static void test_wrapper(void)
{
    trace_t *t = NULL;
    imp_result r;
    ms_error err;
    ms_status st = imp_pytorch_load_buffer("wrap.json", WRAPPER, strlen(WRAPPER), NULL, &t, &r,
                                           &err);
    TAP_OK(st == MS_OK && trace_count(t) == 2, "wrapper form imports (%s)",
           st ? err.msg : "ok");
    if (st != MS_OK) return;
    unsigned all = IMP_HAS_STATS_RESERVED_PEAK | IMP_HAS_STATS_ALLOCATED_PEAK |
                   IMP_HAS_STATS_RETRIES | IMP_HAS_STATS_SEGMENTS;
    TAP_OK((r.has & all) == all && r.stats_reserved_peak_bytes == 2097152 &&
           r.stats_allocated_peak_bytes == 512 && r.stats_num_alloc_retries == 0 &&
           r.stats_segments_allocated == 1,
           "memory_stats values returned");
    TAP_OK(r.peak_reserved_bytes == 2097152 && r.peak_reserved_bytes == r.stats_reserved_peak_bytes,
           "trace peak reserved agrees with memory_stats");
    TAP_OK(meta_is(t, "pytorch.stats.reserved_bytes.all.peak", "2097152") &&
           meta_is(t, "pytorch.capture.device_name", "NVIDIA H100 80GB HBM3") &&
           meta_is(t, "pytorch.capture.layers", "4") &&
           !trace_get_meta(t, "pytorch.capture.dims") && !trace_get_meta(t, "pytorch.capture.bad key"),
           "wrapper meta copied as meta lines (scalars only)");
    imp_result_release(&r);
    trace_free(t);
}

/* Expandable segments map and unmap instead of segment_alloc; a lost free and a 0-byte alloc
 * are repaired with warnings. */
static const char *EXPANDABLE =
    "{\"segments\": [{\"device\": 0, \"total_size\": 3145728, \"is_expandable\": true}],\n"
    " \"device_traces\": [[\n"
    "  {\"action\": \"segment_map\", \"addr\": 0, \"size\": 4194304, \"stream\": 0},\n"
    "  {\"action\": \"segment_map\", \"addr\": 4194304, \"size\": 2097152, \"stream\": 0},\n"
    "  {\"action\": \"alloc\", \"addr\": 0, \"size\": 64, \"stream\": 0},\n"
    "  {\"action\": \"alloc\", \"addr\": 0, \"size\": 128, \"stream\": 0},\n"
    "  {\"action\": \"alloc\", \"addr\": 512, \"size\": 0, \"stream\": 0},\n"
    "  {\"action\": \"segment_unmap\", \"addr\": 0, \"size\": 4194304, \"stream\": 0},\n"
    "  {\"action\": \"segment_map\", \"addr\": 6291456, \"size\": 1048576, \"stream\": 0},\n"
    "  {\"action\": \"annotate\", \"addr\": 0, \"size\": 0, \"stream\": 0}]],\n"
    " \"memory_stats\": {\"num_device_alloc\": 3, \"segment.all.allocated\": 0}}\n";

static void test_expandable(void)
{
    trace_t *t = NULL;
    imp_result r;
    ms_error err;
    ms_status st = imp_pytorch_load_buffer("exp.json", EXPANDABLE, strlen(EXPANDABLE), NULL, &t,
                                           &r, &err);
    TAP_OK(st == MS_OK, "expandable-segment trace imports (%s)", st ? err.msg : "ok");
    if (st != MS_OK) return;
    TAP_OK(r.segment_maps == 3 && r.segment_unmaps == 1 && r.segments == 0 &&
           r.peak_reserved_bytes == 6291456 && r.reserved_start_bytes == 0 &&
           r.end_reserved_bytes == 3145728,
           "map/unmap drive reserved bytes: peak 6 MiB (got %llu)",
           (unsigned long long)r.peak_reserved_bytes);
    TAP_OK(trace_count(t) == 3 && rec_is_alloc(trace_get(t, 0), 1, 64, 0) &&
           rec_is_free(trace_get(t, 1), 1) && rec_is_alloc(trace_get(t, 2), 2, 128, 0) &&
           r.live_addr_reused == 1 && r.zero_size_allocs == 1 && r.other_actions == 1,
           "alloc at a live address frees the old tensor; 0-byte alloc dropped");
    TAP_OK((r.has & IMP_HAS_STATS_DEVICE_ALLOCS) && r.stats_num_device_alloc == 3 &&
           !(r.has & IMP_HAS_STATS_RESERVED_PEAK) && !trace_get_meta(t, "pytorch.segment_sizes"),
           "partial memory_stats; no segment_sizes meta without segments");
    imp_result_release(&r);
    trace_free(t);
}

/* Traces recorded on a GPU by traces/capture/record_fixtures.sh, when they are in
 * tests/fixtures/: the trace's own accounting must reproduce what PyTorch reported. */
static void test_recorded(void)
{
    static const char *names[] = {"gpt2-plain.json.gz", "gpt2-checkpoint.json.gz",
                                  "gpt2-lora.json.gz"};
    const char *src = getenv("srcdir");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/tests/fixtures/%s", src ? src : ".", names[i]);
        if (access(p, R_OK) != 0) {
            TAP_NOTE("%s not present: recorded-trace checks skipped", p);
            continue;
        }
        trace_t *t = NULL;
        imp_result r;
        ms_error err;
        ms_status st = imp_pytorch_load(p, NULL, &t, &r, &err);
        TAP_OK(st == MS_OK && r.allocs > 0 && r.unknown_frees == 0 &&
               (r.has & IMP_HAS_STATS_RESERVED_PEAK) &&
               r.peak_reserved_bytes == r.stats_reserved_peak_bytes &&
               r.segments == r.stats_segments_allocated,
               "%s: peak reserved %llu and %llu segments as memory_stats says (%s)", names[i],
               (unsigned long long)r.peak_reserved_bytes, (unsigned long long)r.segments,
               st ? err.msg : "ok");
        if (st == MS_OK) imp_result_release(&r);
        trace_free(t);
    }
}

/* Each hostile input must fail with its status and a message that names file, line and
 * column, and contains a hint of the problem. */
static void test_malformed(void)
{
    static const struct { const char *text; ms_status st; const char *where, *what; } cases[] = {
        {"{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1", MS_ERR_PARSE, "bad.json:1:",
         "end of"},
        {"[1, 2]", MS_ERR_PARSE, "bad.json:1:1:", "root must be a JSON object"},
        {"", MS_ERR_PARSE, "bad.json:1:1:", "empty input"},
        {"\x80\x04\x95\x10\x01}\x94(\x8c\x08segments", MS_ERR_PARSE, "bad.json:1:1:",
         "python -m memsim convert bad.json OUT.json.gz"},
        {"{\"device_traces\": {}}", MS_ERR_PARSE, "bad.json:1:19:", "must be a list"},
        {"{\n  \"device_traces\": [[\n    {\"action\": \"alloc\", \"addr\": 1, \"size\": -5, "
         "\"stream\": 0}\n  ]]\n}", MS_ERR_PARSE, "bad.json:3:5:", "below 0"},
        {"{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1, \"stream\": 0}]]}",
         MS_ERR_PARSE, "bad.json:1:", "missing \"size\""},
        {"{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1, \"size\": 1152921504606846976,"
         " \"stream\": 0}]]}", MS_ERR_PARSE, "bad.json:1:", "above the limit"},
        {"{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1, \"size\": 1.5, \"stream\": 0}]]}",
         MS_ERR_PARSE, "bad.json:1:", "must be an integer"},
        {"{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": \"0x10\", \"size\": 8, "
         "\"stream\": 0}]]}", MS_ERR_PARSE, "bad.json:1:", "\"addr\" must be an integer"},
        {"{\"device_traces\": [[{\"action\": 7}]]}", MS_ERR_PARSE, "bad.json:1:21:", "non-string"},
        {"{\"device_traces\": [[1]]}", MS_ERR_PARSE, "bad.json:1:21:", "must be an object"},
        {"{\"device_traces\": [[]]} x", MS_ERR_PARSE, "bad.json:1:25:", "after the root"},
        {"{\n\"device_traces\": [[\n{\"action\": tru}]]}", MS_ERR_PARSE, "bad.json:3:", "invalid"},
        {"{\"segments\": []}", MS_ERR_PARSE, "bad.json:", "no \"device_traces\""},
        {"{\"device_traces\": [[], []]}", MS_ERR_INVALID, "bad.json:", "no device has trace"},
        {"{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1, \"size\": 8, \"size\": 9, "
         "\"stream\": 0}]]}", MS_ERR_PARSE, "bad.json:1:", "duplicate"},
        {"{\"x\": 1, \"device_traces\": [[]], \"x\": 2}", MS_ERR_PARSE, "bad.json:1:33:",
         "duplicate object key 'x'"},
        {"{\"snapshot\": {\"device_traces\": [[]], \"y\": {}, \"y\": 0}}", MS_ERR_PARSE,
         "bad.json:1:", "duplicate object key 'y'"},
        {"{\"device_traces\": [[]], \"device_traces\": [[]]}", MS_ERR_PARSE, "bad.json:1:25:",
         "duplicate"},
        {"{\"device_traces\": [[{\"action\": \"free_completed\", \"size\": 8}]]}", MS_ERR_PARSE,
         "bad.json:1:", "missing \"addr\""},
        {"{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1, \"size\": 8, \"stream\": 0},]]}",
         MS_ERR_PARSE, "bad.json:1:", "unexpected"},
        {"{\"memory_stats\": {\"reserved_bytes.all.peak\": \"big\"}, \"device_traces\": [[]]}",
         MS_ERR_PARSE, "bad.json:1:", "must be an integer"},
        {"{\"segments\": [{\"device\": 0}], \"device_traces\": [[]]}", MS_ERR_PARSE,
         "bad.json:1:15:", "missing \"total_size\""},
        {"{\"device_traces\": [[{\"action\": \"segment_alloc\", \"addr\": 1, \"size\": -1}]]}",
         MS_ERR_PARSE, "bad.json:1:", "below 0"},
        {"{\"a\" 1}", MS_ERR_PARSE, "bad.json:1:6:", "expected ':'"},
        {"{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1, \"size\": 8, \"stream\": 0}]], "
         "\"meta\": []}", MS_ERR_PARSE, "bad.json:1:", "\"meta\" must be an object"},
    };
    size_t n = sizeof cases / sizeof *cases, good = 0;
    for (size_t i = 0; i < n; i++) {
        ms_error err;
        imp_result r;
        ms_status st = load_text(cases[i].text, NULL, &r, &err);
        int ok = st == cases[i].st && strncmp(err.msg, cases[i].where, strlen(cases[i].where)) == 0 &&
                 strstr(err.msg, cases[i].what) != NULL;
        if (!ok) TAP_NOTE("case %zu: status %s, message: %s", i, ms_status_str(st), err.msg);
        good += ok;
    }
    TAP_OK(good == n, "%zu of %zu malformed inputs rejected with FILE:LINE:COLUMN messages",
           good, n);

    /* a jansson parse error deep in a line reports jansson's column */
    ms_error err;
    imp_result r;
    ms_status st = load_text("{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1, \"size\": }]]}",
                             NULL, &r, &err);
    TAP_OK(st == MS_ERR_PARSE && strncmp(err.msg, "bad.json:1:60: ", 15) == 0,
           "parse error points at the offending '}' (column 60): %s", err.msg);

    /* deep nesting in a skipped value: an error, not a stack overflow */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 64);
    if (deep) {
        char *p = deep;
        p += sprintf(p, "{\"x\": ");
        memset(p, '[', depth);
        p += depth;
        memset(p, ']', depth);
        p += depth;
        sprintf(p, ", \"device_traces\": [[]]}");
        st = load_text(deep, NULL, &r, &err);
        TAP_OK(st == MS_ERR_PARSE && strstr(err.msg, "bad.json:1:"), "deep nesting: %.80s",
               err.msg);
        free(deep);
    }

    /* random bytes and truncations of a valid input never crash */
    char *text;
    size_t len;
    if (ms_read_all(fixture_path(), 1 << 20, &text, &len, &err) == MS_OK) {
        int failed_ok = 1;
        unsigned seed = 12345;
        for (size_t cut = 0; cut < len; cut += 37) {
            trace_t *t = NULL;
            st = imp_pytorch_load_buffer("cut.json", text, cut, NULL, &t, &r, &err);
            if (st == MS_OK) { imp_result_release(&r); trace_free(t); failed_ok = 0; }
            else if (!strstr(err.msg, "cut.json:")) failed_ok = 0;
        }
        for (int k = 0; k < 300; k++) {
            char *m = malloc(len + 1);
            memcpy(m, text, len + 1);
            for (int j = 0; j < 3; j++) {
                seed = seed * 1103515245u + 12345u;
                m[(seed >> 8) % len] = (char)(seed >> 3);
            }
            trace_t *t = NULL;
            st = imp_pytorch_load_buffer("mut.json", m, len, NULL, &t, &r, &err);
            if (st == MS_OK) { imp_result_release(&r); trace_free(t); }
            else if (!strstr(err.msg, "mut.json")) failed_ok = 0;
            free(m);
        }
        TAP_OK(failed_ok, "truncated and mutated inputs fail cleanly with the file named");
        free(text);
    }
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/memsim-test-import-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! cannot create a temporary directory\n");
        return 99;
    }
    test_fixture();
    test_write_and_gzip();
    test_wrapper();
    test_expandable();
    test_recorded();
    test_malformed();
    rmdir(tmpdir);
    return tap_done();
}
