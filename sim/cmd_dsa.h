/* cmd_dsa.h — `memsim dsa`: offline dynamic storage allocation of instance files (static
 * memory planning, memory/dsa.h). Called by sim/main.c's command table. */
#ifndef MEMSIM_CMD_DSA_H
#define MEMSIM_CMD_DSA_H

/* argv[0] is "dsa". Returns an MS_EXIT_* code (base/util.h). */
int cmd_dsa(int argc, char **argv);

#endif
