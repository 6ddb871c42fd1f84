/* api.h — memsim's C API for bindings, the one the Python package (python/memsim) loads from
 * libmemsim.so: `memsim simulate`, `compare`, `replay` and `plan` as calls. Each takes the
 * command's own options (memsim CMD --help) as a NULL-terminated list of strings, e.g.
 * {"--model", "gpt2-1b", "--seq", "1024", NULL}, and returns the results as a JSON document
 * (docs/API.md) built from the result structs (sim/results.h, sim/replay.h, planners/plan.h)
 * that the command prints and writes. The options that print or fork (--help, --plot,
 * --breakdown, -j) are not taken. Nothing is written to standard output; progress lines go to
 * standard error unless "--quiet" is given. Files the options name (--csv, --timeline,
 * --memcsv, --schedule, -o) are written as the command writes them. Calls are not reentrant:
 * one at a time per process (option parsing uses getopt's globals). */
#ifndef MEMSIM_API_H
#define MEMSIM_API_H

#include <stddef.h>

/* Raised when a document's form changes incompatibly; documents carry it as "api_version". */
#define API_VERSION 1

/* Each call returns 0 with *json a malloc'd NUL-terminated document (free it with api_free),
 * or an ms_status (base/util.h; options the command refuses: MS_ERR_INVALID) with *json NULL
 * and the message, as the command prints it after "memsim CMD: ", in err (NUL-terminated, cut
 * to err_len; err may be NULL). A run that ends in an oom, or a compared policy that could not
 * run, is a result, not an error: its row says so. */
int api_simulate(const char *const *options, char **json, char *err, size_t err_len);
int api_compare(const char *const *options, char **json, char *err, size_t err_len);
int api_replay(const char *const *options, char **json, char *err, size_t err_len);
int api_plan(const char *const *options, char **json, char *err, size_t err_len);

void api_free(char *json);
int api_version(void);
/* The name of a status a call returned ("invalid argument", ...). */
const char *api_status_name(int status);
/* The exit status the memsim command gives for it (README: 2 usage, 3 bad input, ...). */
int api_exit_code(int status);

#endif
