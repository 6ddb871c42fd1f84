/* main.c — memsim-paper, the program of the paper drivers (experiments/NAME/driver.c): memsim
 * hands `memsim protrain`, `memsim memferry` and `memsim gmlake` over to it, as it hands the
 * GPU subcommands to memsim-run, so that these reproductions live with their experiments and
 * call the simulator only through its library. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "experiments/gmlake/driver.h"
#include "experiments/memferry/driver.h"
#include "experiments/protrain/driver.h"
#include "base/util.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} drivers[] = {
    {"protrain", driver_protrain},
    {"memferry", driver_memferry},
    {"gmlake", driver_gmlake},
};

/* The drivers' tables on standard output are their output: a failed write is an I/O error. */
static int stdout_checked(int rc)
{
    if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
    fprintf(stderr, "memsim: error writing to standard output: %s\n", strerror(errno));
    return rc == MS_EXIT_OK ? MS_EXIT_IO : rc;
}

int main(int argc, char **argv)
{
    if (argc < 1) return MS_EXIT_USAGE;
    /* Handed `protrain ...` by memsim, or called as `memsim-paper protrain ...`. */
    const char *cmd = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (!strcmp(cmd, "memsim-paper")) {
        argc--;
        argv++;
        cmd = argc > 0 ? argv[0] : "";
    }
    for (size_t i = 0; i < sizeof drivers / sizeof *drivers; i++)
        if (!strcmp(cmd, drivers[i].name)) return stdout_checked(drivers[i].fn(argc, argv));
    fprintf(stderr, "usage: memsim-paper protrain|memferry|gmlake [options] (run by memsim "
                    "protrain, memsim memferry and memsim gmlake)\n");
    return MS_EXIT_USAGE;
}
