/* cmds.h — the memsim subcommands, one function each (argv[0] is the subcommand's name).
 * Each returns an exit status (MS_EXIT_* in base/util.h). Called only by sim/main.c. */
#ifndef MEMSIM_CMDS_H
#define MEMSIM_CMDS_H

int cmd_list(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_dsa(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_experiment(int argc, char **argv);
int cmd_validate(int argc, char **argv);

#endif
