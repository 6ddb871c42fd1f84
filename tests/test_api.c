/* test_api.c — tests of the library API (sim/api.c): each call's document holds what the
 * command's CSV holds for the same options, a compared policy that cannot run is an error
 * row and not an error, the plan's text is the plan file, replay's numbers are replay_file's,
 * refused options come back as messages and never as output, nothing goes to standard output,
 * and the same call gives the same bytes (also after a parse that stopped midway). */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/api.h"
#include "sim/replay.h"
#include "sim/results.h"
#include "tests/tap.h"
#include "traces/machine.h"
#include "base/util.h"

static char dir[256];
static char errbuf[1024];

/* Standard output goes to a file while the library runs: whatever lands there is a bug. */
static int saved_stdout = -1;
static char stdout_path[300];

static void capture_stdout(void)
{
    fflush(stdout);
    saved_stdout = dup(1);
    int fd = open(stdout_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(fd, 1);
    close(fd);
}

static void restore_stdout(void)
{
    fflush(stdout);
    dup2(saved_stdout, 1);
    close(saved_stdout);
}

typedef int (*api_fn)(const char *const *, char **, char *, size_t);

static int call(api_fn fn, const char *const *opts, char **json)
{
    capture_stdout();
    int st = fn(opts, json, errbuf, sizeof errbuf);
    restore_stdout();
    return st;
}

static char *slurp(const char *path)
{
    char *buf = NULL;
    size_t len;
    ms_error err;
    if (ms_read_all(path, SIZE_MAX, &buf, &len, &err) != MS_OK) TAP_NOTE("%s", err.msg);
    return buf;
}

/* Splits one CSV line on commas (the rows tested hold no quoted field). */
static size_t split_csv(char *line, char **f, size_t max)
{
    size_t n = 0;
    for (char *p = line; p && n < max; n++) {
        f[n] = p;
        p = strchr(p, ',');
        if (p) *p++ = '\0';
    }
    return n;
}

/* Every column of the CSV's data row `row` (1 = first) appears in json as "column":value with
 * the CSV's own text (numbers) or quoted (status and strings). Returns the columns missing. */
static int json_matches_csv(const char *json, const char *csv_path, int row)
{
    char *csv = slurp(csv_path);
    if (!csv) return -1;
    char *lines[8] = {0};
    size_t nl = 0;
    for (char *p = csv; p && nl < 8; nl++) {
        lines[nl] = p;
        p = strchr(p, '\n');
        if (p) *p++ = '\0';
    }
    char *head[128], *val[128];
    size_t nh = split_csv(lines[0], head, 128), nv = split_csv(lines[row], val, 128);
    int missing = nh == res_csv_ncolumns() && nv == nh ? 0 : 1000;
    for (size_t i = 0; i < nh && i < nv; i++) {
        char want[1200];
        int numeric = val[i][0] && strspn(val[i], "0123456789.-+e") == strlen(val[i]);
        snprintf(want, sizeof want, numeric ? "\"%s\":%s," : "\"%s\":\"%s\",", head[i], val[i]);
        if (i + 1 == nh) want[strlen(want) - 1] = '}';
        if (!strstr(json, want)) {
            TAP_NOTE("not in the document: %s", want);
            missing++;
        }
    }
    free(csv);
    return missing;
}

static void test_simulate(void)
{
    char csv[300];
    snprintf(csv, sizeof csv, "%s/sim.csv", dir);
    const char *o[] = {"--model", "gpt2-1b", "--seq", "1024", "--batch", "8", "--machine",
                       "h100-sxm", "--policy", "full-swap", "--csv", csv, NULL};
    char *j = NULL, *j2 = NULL;
    int st = call(api_simulate, o, &j);
    TAP_OK(st == 0 && j, "simulate returns a document (%s)", st ? errbuf : "ok");
    if (!j) return;
    TAP_OK(!strncmp(j, "{\"api_version\":1,\"command\":\"simulate\",\"machine\":{\"name\":"
                       "\"h100-sxm\"", 58), "the document opens with the version, command, machine");
    TAP_OK(strstr(j, "\"exit_status\":0}") != NULL, "and ends with the command's exit status");
    TAP_OK(json_matches_csv(j, csv, 1) == 0, "every CSV column has the same value in the document");
    st = call(api_simulate, o, &j2);
    TAP_OK(st == 0 && j2 && !strcmp(j, j2), "the same call gives the same bytes");
    api_free(j);
    api_free(j2);
}

static void test_compare(void)
{
    char csv[300];
    snprintf(csv, sizeof csv, "%s/cmp.csv", dir);
    /* memferry plans one GPU: on tp 4 cp 2 dp 4 its row is an error, the others run */
    const char *o[] = {"--model", "gpt-7b", "--seq", "64K", "--tp", "4", "--cp", "2", "--dp", "4",
                       "--policies", "keep-all,memferry,full-swap", "--csv", csv, "--quiet", NULL};
    char *j = NULL;
    int st = call(api_compare, o, &j);
    TAP_OK(st == 0 && j, "compare with a policy that cannot run still returns (%s)",
           st ? errbuf : "ok");
    if (!j) return;
    TAP_OK(strstr(j, "\"policy\":\"memferry\"") && strstr(j, "\"status\":\"error\""),
           "the policy that cannot run has an error row");
    TAP_OK(strstr(j, "\"exit_status\":1}") != NULL, "exit_status is the command's (1)");
    char *csvtext = slurp(csv);
    int quoted = csvtext && strchr(csvtext, '"'); /* the failure text may be quoted */
    free(csvtext);
    TAP_OK(json_matches_csv(j, csv, 1) == 0, "keep-all's row matches the CSV");
    if (quoted) TAP_SKIP("memferry's failure column is quoted in the CSV");
    else TAP_OK(json_matches_csv(j, csv, 2) == 0, "memferry's error row matches the CSV");
    TAP_OK(json_matches_csv(j, csv, 3) == 0, "full-swap's row matches the CSV");
    api_free(j);
}

static void test_refusals(void)
{
    char *j = (char *)1;
    const char *bad_seq[] = {"--seq", "abc", NULL};
    int st = call(api_compare, bad_seq, &j);
    TAP_OK(st != 0 && !j && !strcmp(errbuf, "--seq 'abc': expected a positive count"),
           "a bad value: the command's message, no document (%s)", errbuf);
    TAP_OK(!strcmp(api_status_name(st), ms_status_str(MS_ERR_INVALID)), "status: invalid");
    const char *pol[] = {"--policies", "keep-all,nosuch", NULL};
    st = call(api_compare, pol, &j);
    TAP_OK(st != 0 && strstr(errbuf, "unknown policy 'nosuch'"), "an unknown policy: %s", errbuf);
    const char *help[] = {"--help", NULL};
    st = call(api_simulate, help, &j);
    TAP_OK(st != 0 && !strcmp(errbuf, "unknown option '--help' (memsim simulate --help lists "
                                      "the options)"), "--help is not taken: %s", errbuf);
    const char *plot[] = {"--plot", "x", NULL};
    st = call(api_compare, plot, &j);
    TAP_OK(st != 0 && strstr(errbuf, "unknown option '--plot'"), "--plot is not taken");
    const char *jobs[] = {"-j", "2", NULL};
    st = call(api_compare, jobs, &j);
    TAP_OK(st != 0 && strstr(errbuf, "'-j'"), "-j is not taken: %s", errbuf);
    const char *dash[] = {"--model", "gpt2-1b", "--seq", "1024", "-o", "-", NULL};
    st = call(api_plan, dash, &j);
    TAP_OK(st != 0 && strstr(errbuf, "standard output"), "plan -o - is refused");
    const char *missing[] = {"--model", "gpt2-1b", "--seq", NULL};
    st = call(api_simulate, missing, &j);
    TAP_OK(st != 0 && !strcmp(errbuf, "option '--seq' needs a value"), "a missing value: %s",
           errbuf);
    const char *machine[] = {"--machine", "nosuch", NULL};
    st = call(api_simulate, machine, &j);
    TAP_OK(st != 0 && strstr(errbuf, "unknown machine 'nosuch'") && api_exit_code(st) == 3,
           "an unknown machine: exit code 3 as the command's");
    st = api_simulate(bad_seq, &j, NULL, 0);
    TAP_OK(st != 0 && !j, "err may be NULL");
    char small[8];
    st = api_simulate(bad_seq, &j, small, sizeof small);
    TAP_OK(st != 0 && !strcmp(small, "--seq '"), "the message is cut to the buffer");
}

static void test_plan(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/p.plan", dir);
    const char *o[] = {"--model", "gpt2-1b", "--seq", "1024", "--machine", "h100-sxm",
                       "--policy", "full-recompute", "-o", path, NULL};
    char *j = NULL;
    int st = call(api_plan, o, &j);
    TAP_OK(st == 0 && j, "plan returns a document (%s)", st ? errbuf : "ok");
    char *text = slurp(path);
    if (!j || !text) return;
    char *esc = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&esc, &len);
    fputs("\"text\":", mf);
    ms_json_str(mf, text);
    fclose(mf);
    TAP_OK(strstr(j, esc) != NULL, "its text is the plan file -o wrote");
    TAP_OK(strstr(j, "\"policy\":\"full-recompute\"") && strstr(j, "\"decision\":\"recompute\""),
           "its tensors carry the policy's decisions");
    free(esc);
    free(text);
    api_free(j);
}

static void test_replay(void)
{
    const char *src = getenv("srcdir");
    char trace[512];
    snprintf(trace, sizeof trace, "%s/experiments/validate/traces/h100-sxm/real-8K.trace.gz",
             src ? src : ".");
    const char *o[] = {"--trace", trace, "--allocator", "caching,expandable", NULL};
    char *j = NULL;
    int st = call(api_replay, o, &j);
    TAP_OK(st == 0 && j, "replay returns a document (%s)", st ? errbuf : "ok");
    if (!j) return;
    machine_profile *mp = NULL;
    ms_error err;
    replay_result r;
    replay_result_init(&r);
    replay_opts ro;
    replay_opts_default(&ro);
    ro.allocator = "expandable";
    int ok = machine_load_named("h100-sxm", &mp, &err) == MS_OK;
    if (ok) ro.machine = &mp->m;
    ok = ok && replay_file(trace, &ro, &r, &err) == MS_OK;
    char want[200];
    snprintf(want, sizeof want, "\"allocator\":\"expandable\",\"status\":\"ok\",\"events\":%llu,",
             (unsigned long long)r.events);
    TAP_OK(ok && strstr(j, want), "expandable's events are replay_file's");
    snprintf(want, sizeof want, "\"peak_reserved_bytes\":%llu,",
             (unsigned long long)r.peak_reserved_bytes);
    char *second = strstr(j, "\"allocator\":\"expandable\"");
    TAP_OK(second && strstr(second, want), "and its peak reserved bytes (%llu)",
           (unsigned long long)r.peak_reserved_bytes);
    replay_result_clear(&r);
    machine_profile_free(mp);
    api_free(j);
    const char *oom[] = {"--trace", trace, "--capacity", "1GiB", NULL};
    st = call(api_replay, oom, &j);
    TAP_OK(st == 0 && j && strstr(j, "\"status\":\"oom\"") && strstr(j, "\"oom\":{\"index\":")
               && strstr(j, "\"exit_status\":1}"),
           "an oom is a result with the failing request, exit_status 1");
    api_free(j);
    const char *none[] = {"--allocator", "caching", NULL};
    st = call(api_replay, none, &j);
    TAP_OK(st != 0 && !strcmp(errbuf, "--trace FILE is required"), "replay without --trace: %s",
           errbuf);
    const char *help[] = {"--trace", trace, "--help", NULL};
    st = call(api_replay, help, &j);
    TAP_OK(st != 0 && strstr(errbuf, "--help"), "replay --help is refused");
    const char *bad[] = {"--trace", trace, "--roundup-power2", "3", NULL};
    st = call(api_replay, bad, &j);
    TAP_OK(st != 0 && strstr(errbuf, "bad value '3' for --roundup-power2"), "%s", errbuf);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/memsim-test-api-XXXXXX");
    if (!mkdtemp(dir)) TAP_SKIP_ALL("cannot create a temporary folder");
    snprintf(stdout_path, sizeof stdout_path, "%s/stdout", dir);
    TAP_OK(api_version() == API_VERSION, "api_version");
    test_simulate();
    test_compare();
    test_refusals();
    test_plan();
    test_replay();
    struct stat sb;
    TAP_OK(stat(stdout_path, &sb) == 0 && sb.st_size == 0,
           "the calls wrote nothing to standard output");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) TAP_NOTE("could not remove %s", dir);
    return tap_done();
}
