/* tap.h — a minimal TAP producer for memsim's unit tests (Automake's tap-driver counts each
 * "ok"/"not ok" line as one test). Header-only, used only by tests/. */
#ifndef MEMSIM_TAP_H
#define MEMSIM_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int tap_count_, tap_failed_;

static void tap_ok_(int cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), unused));
static void tap_ok_(int cond, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    tap_count_++;
    printf("%s %d - ", cond ? "ok" : "not ok", tap_count_);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!cond) {
        tap_failed_++;
        printf("#   failed at %s:%d\n", file, line);
    }
    fflush(stdout);
}

/* TAP_OK(condition, "description %d", args...) */
#define TAP_OK(cond, ...) tap_ok_(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* Diagnostics (ignored by the harness, kept in the log). */
#define TAP_NOTE(...) (printf("# "), printf(__VA_ARGS__), printf("\n"))

/* Skips one test, counted as skipped by the harness: "ok N # SKIP reason". */
#define TAP_SKIP(...) (tap_count_++, printf("ok %d # SKIP ", tap_count_), printf(__VA_ARGS__), \
                       printf("\n"))

/* Skips the whole program: "1..0 # SKIP reason". */
#define TAP_SKIP_ALL(reason) do { printf("1..0 # SKIP %s\n", reason); return 0; } while (0)

/* Prints the plan and returns the exit status for main(). */
static int tap_done(void) __attribute__((unused));
static int tap_done(void)
{
    printf("1..%d\n", tap_count_);
    return tap_failed_ ? 1 : 0;
}

#endif
