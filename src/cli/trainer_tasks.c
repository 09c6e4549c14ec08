/* The trainer's front: which task trains a model (--model), and what
 * depends on it. The loop (trainer.c) and the tasks (trainer_mnist.c,
 * trainer_gpt.c) do not call each other's way back: the tasks use the
 * loop's helpers, this file hands the loop its task. */
#include "cli/trainer.h"

#include <string.h>

/* The task of a model's name (NULL: none). */
static const trainer_task_ops *task_for(const char *model) {
    if (!model) return NULL;
    if (!strcmp(model, "gpt")) return &trainer_task_gpt;
    if (!strcmp(model, "mlp") || !strcmp(model, "cnn")) return &trainer_task_mnist;
    return NULL;
}

void trainer_defaults(trainer_cfg *cfg) {
    trainer_loop_defaults(cfg);
    trainer_gpt_preset(cfg, "tiny"); /* --model gpt */
}

int trainer_run(const trainer_cfg *cfg, trainer_result *res, bool keep_model) {
    return trainer_loop(cfg, task_for(cfg->model), res, keep_model);
}

void trainer_print_summary(FILE *f, const trainer_cfg *cfg, const trainer_result *r) {
    const trainer_task_ops *ops = task_for(cfg->model);
    if (ops) ops->print_summary(f, cfg, r);
}
