/* driver.h — the gmlake experiment's driver (experiments/gmlake/driver.c): `memsim gmlake`,
 * GMLake's fragmentation study (ASPLOS'24 section 5) in memsim. Called by the experiments' program memsim-paper
 * (experiments/main.c), which memsim hands `memsim gmlake` over to; experiments/gmlake/run.sh runs it. */
#ifndef MEMSIM_EXPERIMENTS_GMLAKE_DRIVER_H
#define MEMSIM_EXPERIMENTS_GMLAKE_DRIVER_H

/* The command: argv[0] is "gmlake"; returns an exit status (MS_EXIT_* in base/util.h). */
int driver_gmlake(int argc, char **argv);

#endif
