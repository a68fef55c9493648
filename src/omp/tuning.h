/* Tuned constants of the OpenMP runtime, each with its reason. Those of its waiting
 * are waiting's own (src/wait/tuning.h). */
#ifndef LOCKSTEP_OMP_TUNING_H
#define LOCKSTEP_OMP_TUNING_H

/* Work-share descriptors in flight per team: with nowait, a thread may run this many
 * constructs ahead of the slowest before it waits for a descriptor to come free. */
#define LS_OMP_WS_RING 8u

/* The places in a member's deque of tasks; a power of 2. */
#define LS_OMP_DEQUE_CAP 256u

/* A creator runs a new task at once, not queued, when its deque holds this many tasks
 * per team member: the others have enough to take, and a tiny task costs less run
 * here than moved to another CPU. */
#define LS_OMP_QUEUED_PER_MEMBER 16

/* ... and while it does, it looks at what the thieves took (a line they write) only
 * after this many TSC ticks: once per stretch of tiny tasks, yet after every task long
 * enough to matter, so the others never wait long for the queue to refill. */
#define LS_OMP_QUEUE_RECHECK_TICKS 65536u

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
