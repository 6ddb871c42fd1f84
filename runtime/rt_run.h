/* rt_run.h — `memsim run`: generate a workload trace, plan it (a policy or a plan file), lower
 * it to a schedule and execute that schedule on the GPU with runtime/rt_exec.h; print the
 * measured iterations next to what the schedule's durations imply and write a results CSV
 * with the simulator's column names. Called by runtime/main.c. */
#ifndef MEMSIM_RT_RUN_H
#define MEMSIM_RT_RUN_H

/* argv[0] is "run". Returns the process exit status (base/util.h's MS_EXIT_*): 0 when the
 * run produced a result (ok, oom or oohm), 1 when no GPU is usable or the run failed on the
 * GPU, 2 for a bad command line, 3 for bad input or an unknown name, 4 for file errors. */
int rt_run_main(int argc, char **argv);

#endif
