/* Work a thread leaves to its exit: releasing the memory it keeps between calls (see cg__at_thread_exit). */
#include "cgrad/core.h"

#include <pthread.h>
#include <string.h>

#include "error.h"
#include "thread.h"

/* the backward engine's stacks, the CPU GEMM's buffer, the GPUs a thread drives, the autocast cache */
#define MAX_EXIT_HOOKS 8

static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static int exit_key_error; /* pthread_key_create's, 0 once the key exists */
static _Thread_local void (*exit_hooks[MAX_EXIT_HOOKS])(void);
static _Thread_local int nexit_hooks;

/* The key's destructor runs on the exiting thread, whose _Thread_local variables are still there. */
static void run_exit_hooks(void *unused) {
    for (int i = 0; i < nexit_hooks; i++) exit_hooks[i]();
    nexit_hooks = 0;
}

static void exit_key_create(void) { exit_key_error = pthread_key_create(&exit_key, run_exit_hooks); }

cg_status cg__at_thread_exit(void (*fn)(void)) {
    for (int i = 0; i < nexit_hooks; i++)
        if (exit_hooks[i] == fn) return CG_OK;
    if (nexit_hooks == MAX_EXIT_HOOKS)
        return cg__fail(CG_ERR_INVALID_ARG, "more than %d thread-exit hooks", MAX_EXIT_HOOKS);
    pthread_once(&exit_key_once, exit_key_create);
    /* Any non-NULL value makes the destructor run at the thread's exit. */
    int e = exit_key_error ? exit_key_error : pthread_setspecific(exit_key, &nexit_hooks);
    if (e) return cg__fail(CG_ERR_OOM, "cannot arrange this thread's clean-up at exit: %s", strerror(e));
    exit_hooks[nexit_hooks++] = fn;
    return CG_OK;
}
