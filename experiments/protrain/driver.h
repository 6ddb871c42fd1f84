/* driver.h — the protrain experiment's driver (experiments/protrain/driver.c): `memsim protrain`,
 * ProTrain's search, Tables 2 and 4, Figures 3 and 6 in memsim. Called by the experiments' program memsim-paper
 * (experiments/main.c), which memsim hands `memsim protrain` over to; experiments/protrain/run.sh runs it. */
#ifndef MEMSIM_EXPERIMENTS_PROTRAIN_DRIVER_H
#define MEMSIM_EXPERIMENTS_PROTRAIN_DRIVER_H

/* The command: argv[0] is "protrain"; returns an exit status (MS_EXIT_* in base/util.h). */
int driver_protrain(int argc, char **argv);

#endif
