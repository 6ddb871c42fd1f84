/* driver.h — the memferry experiment's driver (experiments/memferry/driver.c): `memsim memferry`,
 * MemFerry's evaluation (Figs. 9-13) in memsim. Called by the experiments' program memsim-paper
 * (experiments/main.c), which memsim hands `memsim memferry` over to; experiments/memferry/run.sh runs it. */
#ifndef MEMSIM_EXPERIMENTS_MEMFERRY_DRIVER_H
#define MEMSIM_EXPERIMENTS_MEMFERRY_DRIVER_H

/* The command: argv[0] is "memferry"; returns an exit status (MS_EXIT_* in base/util.h). */
int driver_memferry(int argc, char **argv);

#endif
