/* The optimizer core shared by the kinds in src/optim (SGD, Adam, AdamW): the module whose packed
 * parameters are stepped (or its data-parallel replicas), the learning rate, and a small vtable so
 * cg_optimizer_step/zero_grad/free dispatch by kind. A kind embeds struct cg_optimizer as its first
 * member and is allocated by cg__optimizer_new. */
#ifndef CGRAD_OPTIM_OPTIMIZER_H
#define CGRAD_OPTIM_OPTIMIZER_H

#include "handle.h"
#include "nn/module.h"

/* A kind's state as a checkpoint stores it (src/io_checkpoint.c): the settings a resumed run must
 * share, buffers in the packed parameters' layout, and one count per parameter. */
#define CG_OPTIM_MAX_BUFFERS 3
typedef struct cg_optimizer_state {
    char settings[1024];                            /* hyperparameters other than lr, "name=value ...", per
                                                     * group ("; " between groups); "" if they do not fit */
    int nbuffers;
    const char *buffer_names[CG_OPTIM_MAX_BUFFERS]; /* PyTorch's state keys, e.g. "exp_avg" */
    cg_tensor **buffers[CG_OPTIM_MAX_BUFFERS];      /* the kind's per-root (total,) buffers; NULL until made */
    const char *count_name;                         /* "step", or "momentum_ready" (0/1) */
} cg_optimizer_state;

typedef struct cg_optimizer_ops {
    const char *name;                       /* "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta" */
    cg_status (*step)(cg_optimizer *opt);
    void (*destroy)(cg_optimizer *opt);     /* frees the kind's state, not the core; may be NULL */
    /* checkpoints: the state and the per-parameter counts (nparams of them) */
    void (*describe)(const cg_optimizer *opt, cg_optimizer_state *st, int64_t *counts);
    cg_status (*check_counts)(const cg_optimizer *opt, const int64_t *counts); /* fails naming the bad one */
    void (*set_counts)(cg_optimizer *opt, const int64_t *counts);
} cg_optimizer_ops;

/* What an optimizer handle (cg_optimizer *, see handle.h) names; read it through cg__opt(handle). A kind
 * embeds it as its first member and allocates from a pool of its own (CG_HANDLE_OPTIMIZER). */
typedef struct cg_optimizer_impl {
    const cg_optimizer_ops *ops;
    cg_handle_pool *pool;     /* the kind's, which cg_optimizer_free gives the slot back to */
    cg_module *module;
    int nroots;               /* the packed parameter sets stepped: the module, or its replicas */
    cg_module **roots;
    int ngroups;              /* torch.optim's param groups: at least one */
    int *group_of;            /* per parameter of the module: its group, or -1 (not stepped) */
    double *lr;               /* per group; cg_optimizer_set_lr changes them between steps */
    double *lr_scale;         /* per group: the most the kind's float update multiplies lr by (cg__lr_check) */
    cg_lr_scheduler *scheduler; /* the schedule bound to it (src/optim/lr_scheduler.c), or NULL */
} cg_optimizer_impl;

/* One group as a kind's constructor hands it to the core: the tensors (n < 0: every parameter of
 * the module), its lr and lr_scale (checked by the kind). */
typedef struct cg_group_spec {
    int n;
    cg_tensor *const *params;
    double lr, lr_scale;
} cg_group_spec;

static inline cg_optimizer_impl *cg__opt(const cg_optimizer *opt) { return (cg_optimizer_impl *)cg__handle_object(opt); }

/* Every optimizer hyperparameter, for cg__hyperparam_check. */
typedef enum cg_hyperparam {
    CG_HP_LR,
    CG_HP_MOMENTUM,
    CG_HP_DAMPENING,
    CG_HP_WEIGHT_DECAY,
    CG_HP_EPS,
    CG_HP_BETA1,
    CG_HP_BETA2,
    CG_HP_ALPHA,
    CG_HP_RHO,
    CG_HP_LR_DECAY,
    CG_HP_INITIAL_ACCUMULATOR_VALUE,
} cg_hyperparam;

/* The one check of a hyperparameter, for every kind's constructor, cg_optimizer_set_lr and a
 * checkpoint's restore: value must be finite; in its range (PyTorch's: lr, momentum, weight_decay and
 * eps, alpha, lr_decay, initial_accumulator_value >= 0, betas in [0, 1), rho in [0, 1],
 * dampening any); and a float the update can use, as every update runs in
 * float: at most FLT_MAX, and 0 or at least FLT_MIN (a smaller one would silently become a subnormal
 * or 0). CG_ERR_INVALID_ARG otherwise, as "<who>: invalid learning rate 1e+300: lr must be ...". */
cg_status cg__hyperparam_check(const char *who, cg_hyperparam which, double value);
/* The same for lr, and lr * lr_scale (the most the update multiplies lr by: 1 for SGD; for Adam,
 * lr / (1 - beta1^t) at t = 1 and lr * weight_decay) must be at most FLT_MAX too. */
cg_status cg__lr_check(const char *who, double lr, double lr_scale);

/* fn's errors for a module an optimizer cannot take: NULL, part of another module, no parameters. */
cg_status cg__optimizer_check_module(const cg_module *m, const char *fn);
/* A zeroed optimizer from pool (the kind's, whose objects start with cg_optimizer_impl) over m,
 * which cg__optimizer_check_module accepted, with ngroups groups (lr and lr_scale accepted by
 * cg__lr_check); NULL + fn's error for a tensor that is no parameter of m or is in two groups, or on
 * out-of-memory. */
cg_optimizer *cg__optimizer_new(const cg_optimizer_ops *ops, cg_handle_pool *pool, cg_module *m, int ngroups,
                                const cg_group_spec *groups, const char *fn);
/* The zeroed specs of a kind's constructor (calloc'ed, freed by the caller) once m and the group list
 * pass the checks: cg__optimizer_check_module, and for a group list (groups not NULL; n_of gives a
 * group's size) 1 <= ngroups with some parameter. NULL + fn's error otherwise. */
cg_group_spec *cg__optimizer_specs_new(const cg_module *m, int ngroups, const void *groups,
                                       int n_of(const void *groups, int g), const char *fn);
/* fn's error unless opt is a live optimizer whose module is still alive. */
cg_status cg__check_optimizer(const cg_optimizer *opt, const char *fn);

/* The shortest decimal that reads back as v (as a float when single): "0.9", not "0.899999976". */
const char *cg__shortest_str(double v, bool single, char *buf, size_t len);

/* Checkpoint import: a new (total,) buffer per root, on the root's device, holding values (host,
 * in the packed layout) or zeros when values is NULL; fresh has nroots entries, and nothing is
 * left allocated on failure. cg__optimizer_buffers_swap then frees slots[r] and puts fresh[r] there. */
cg_status cg__optimizer_buffers_new(const cg_optimizer *opt, const float *values, cg_tensor **fresh);
void cg__optimizer_buffers_swap(const cg_optimizer *opt, cg_tensor **slots, cg_tensor **fresh);

/* Whether parameter i of root m is stepped now: it is in a group and got a gradient since zero_grad. */
bool cg__optimizer_steps(const cg_optimizer_impl *opt, const cg_module *m, int i);
/* End of the run of parameters that starts at i (stepped now): i's successors while they are
 * stepped, in i's group and have the same key (state that must match for one fused update). A run
 * includes the alignment padding between parameters, which is zero in every buffer and stays zero. */
int cg__optimizer_run_end(const cg_optimizer_impl *opt, const cg_module *m, int i, const int64_t *key);
/* A per-root (total,) state buffer of root m on m's device: made zeroed when NULL, and moved along
 * (values kept) when the module has moved to another device since. */
cg_status cg__optimizer_buffer_ensure(cg_tensor **buf, const cg_module *m);
/* Per-parameter step counts (PyTorch's state['step']) advance once per step for all replicas, which share
 * one gradient pattern. check fails the step, before anything changes, when a stepped parameter's count
 * would pass INT64_MAX; advance adds one to every stepped parameter's. */
cg_status cg__optimizer_steps_check(const cg_optimizer_impl *opt, const int64_t *steps);
void cg__optimizer_steps_advance(const cg_optimizer_impl *opt, int64_t *steps);
/* The flat (total,) range of parameters [i, j) of m. */
void cg__optimizer_run_range(const cg_module *m, int i, int j, int64_t *begin, int64_t *count);

/* ---- learning-rate schedulers (src/optim/lr_scheduler.c), for checkpoints ---- */
/* A scheduler as a checkpoint stores it: kind and settings a resumed run must share, base lrs, and its
 * position: fields[0] "last_epoch", then the kind's own (ReduceLROnPlateau's best, num_bad_epochs,
 * cooldown_counter; CosineAnnealingWarmRestarts' T_cur, T_i), integers held exactly as doubles. */
#define CG_SCHED_MAX_FIELDS 4
typedef struct cg_scheduler_state {
    const char *kind;       /* "StepLR", ... */
    char settings[512];     /* "name=value ..." */
    int ngroups;
    const double *base_lrs; /* (ngroups), the scheduler's */
    int nfields;
    const char *names[CG_SCHED_MAX_FIELDS];
    double values[CG_SCHED_MAX_FIELDS];
} cg_scheduler_state;
void cg__scheduler_describe(const cg_lr_scheduler *s, cg_scheduler_state *st);
/* An error (no function named: the caller adds its own) unless values (describe's fields) are a state
 * this scheduler can be in. */
cg_status cg__scheduler_check_state(const cg_lr_scheduler *s, const double *values);
/* Sets the position and base lrs; the last lrs become the optimizer's (restored first). */
void cg__scheduler_set_state(cg_lr_scheduler *s, const double *values, const double *base_lrs);
/* Called by cg_optimizer_free: the scheduler's calls fail from then on (it is still the caller's to free). */
void cg__scheduler_unbind(cg_lr_scheduler *s);

/* Over the runs of a root module's parameters that have a gradient (src/optim/clip.c): every gradient
 * times *coef (device memory, not read on the host) or, with coef NULL, clamped to [-clip_value,
 * clip_value]; and the largest magnitude of them all (NaN if any is NaN, 0 without gradients) into
 * *total, a 0-dim tensor made here, without a synchronisation. */
cg_status cg__grad_clip_runs(const cg_module *root, const float *coef, float clip_value);
cg_status cg__grad_max_abs(const cg_module *root, cg_tensor **total);

#endif
