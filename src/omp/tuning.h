/* Tuned constants of the OpenMP runtime, each with its reason. Those of its waiting
 * are waiting's own (src/wait/tuning.h). */
#ifndef LOCKSTEP_OMP_TUNING_H
#define LOCKSTEP_OMP_TUNING_H

/* Work-share descriptors in flight per team: with nowait, a thread may run this many
 * constructs ahead of the slowest before it waits for a descriptor to come free. */
#define LS_OMP_WS_RING 8u

/* A task is run at once, not queued, when its creator's deque holds this many (less
 * one): past that, queueing only costs memory, and every thread has work. A power of 2. */
#define LS_OMP_DEQUE_CAP 256u

/* A task and its data in this many bytes come from a block a thread keeps for reuse
 * (up to LS_OMP_TASK_SPARES of them): most tasks capture a few pointers. */
#define LS_OMP_TASK_BLOCK 256u
#define LS_OMP_TASK_SPARES 256u

/* Blocks a thread frees for another member go back to it this many at a time: one
 * move of the member's return line per batch instead of one per task. */
#define LS_OMP_TASK_GIVE_BATCH 32u

/* A thief waiting at a barrier takes half of a member's queued tasks, up to this
 * many: the lines they share then move once per batch, not once per task. */
#define LS_OMP_STEAL_BATCH 16u

#endif
