/* Autocast in worker threads (PyTorch's AMP examples page, "DataParallel in
 * a single process"): autocast state is per thread, so each worker thread
 * enters its own region; a region in one thread changes nothing in another.
 * Four workers each take a quarter of the batch on their own replica of the
 * model, compute the loss and the scaled gradients under f16 autocast, and
 * the main thread averages the gradients into the model it steps (data
 * parallelism). The example checks that autocast was on in every worker and
 * off in the main thread meanwhile, and that the averaged gradient equals the
 * whole batch's on one thread. */
#include <amp/amp.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define WORKERS 4
#define BATCH 128

typedef struct {
    amp_module *replica;
    amp_tensor *x, *y; /* this worker's shard */
    amp_scaler *scaler;
    bool saw_autocast, failed;
    pthread_barrier_t *inside;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    amp_scope *s = amp_scope_begin();
    amp_autocast_enter(AMP_F16); /* this thread's region */
    w->saw_autocast = amp_autocast_is_enabled();
    pthread_barrier_wait(w->inside); /* every worker is inside its region now */
    amp_tensor *loss = amp_cross_entropy(amp_module_forward(w->replica, w->x), w->y, NULL);
    amp_autocast_exit();
    w->failed = !loss || amp_backward(amp_scaler_scale(w->scaler, loss)) != AMP_OK;
    amp_scope_end(s);
    return NULL;
}

static amp_module *make_model(void) {
    amp_generator g = amp_generator_make(42); /* the same weights each time */
    amp_module *layers[] = {amp_nn_linear(16, 64, true, &g), amp_nn_relu(), amp_nn_linear(64, 4, true, &g)};
    return amp_nn_sequential(layers, 3);
}

int main(void) {
    amp_generator g = amp_generator_make(5);
    amp_scope *data = amp_scope_begin();
    amp_tensor *centers = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(4, 16), &g);
    amp_tensor *y = amp_tensor_keep(amp_tensor_empty(AMP_I64, 1, AMP_SHAPE(1024)));
    for (int64_t i = 0; i < 1024; i++) amp_tensor_set(y, &i, (double)((i * 3) % 4));
    amp_tensor *x = amp_tensor_keep(amp_add(amp_embedding(centers, y), amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(1024, 16), &g)));
    amp_scope_end(data);

    amp_module *model = make_model(), *replicas[WORKERS];
    for (int k = 0; k < WORKERS; k++) replicas[k] = make_model();
    amp_tensor *params[4], *rp[WORKERS][4];
    amp_module_parameters(model, params, NULL, 4);
    for (int k = 0; k < WORKERS; k++) amp_module_parameters(replicas[k], rp[k], NULL, 4);
    amp_optim_opts oo = amp_adamw_opts(1e-2);
    amp_optim *opt = amp_optim_new(params, 4, &oo);
    amp_scaler *scaler = amp_scaler_new(&(amp_scaler_opts){.init_scale = 1024});
    pthread_barrier_t inside;
    pthread_barrier_init(&inside, NULL, WORKERS + 1);

    int ok = 1;
    double worst = 0, first = 0, last = 0;
    for (int step = 0; step < 40; step++) {
        amp_scope *s = amp_scope_begin();
        int64_t b = (step % (1024 / BATCH)) * BATCH;
        worker w[WORKERS];
        pthread_t th[WORKERS];
        for (int k = 0; k < WORKERS; k++) {
            for (int i = 0; i < 4; i++) amp_tensor_copy_(rp[k][i], params[i]); /* broadcast the weights */
            amp_module_zero_grad(replicas[k]);
            int64_t lo = b + k * (BATCH / WORKERS), hi = lo + BATCH / WORKERS;
            w[k] = (worker){replicas[k], amp_slice(x, 0, lo, hi, 1), amp_slice(y, 0, lo, hi, 1), scaler, false, false, &inside};
            pthread_create(&th[k], NULL, work, &w[k]);
        }
        pthread_barrier_wait(&inside);
        ok &= !amp_autocast_is_enabled(); /* the workers' regions are theirs */
        for (int k = 0; k < WORKERS; k++) {
            pthread_join(th[k], NULL);
            ok &= w[k].saw_autocast && !w[k].failed;
        }
        /* the gradient of the mean loss over the batch: the mean of the shards' */
        amp_optim_zero_grad(opt);
        for (int i = 0; i < 4; i++) {
            amp_tensor *sum = amp_tensor_grad(rp[0][i]);
            for (int k = 1; k < WORKERS; k++) sum = amp_add(sum, amp_tensor_grad(rp[k][i]));
            amp_tensor_set_grad(params[i], amp_div_scalar(sum, WORKERS));
        }
        if (step == 0) { /* against the whole batch on this thread */
            amp_tensor *ref[4];
            amp_autocast_enter(AMP_F16);
            amp_tensor *loss = amp_cross_entropy(amp_module_forward(model, amp_slice(x, 0, b, b + BATCH, 1)),
                                                 amp_slice(y, 0, b, b + BATCH, 1), NULL);
            amp_autocast_exit();
            amp_tensor *scaled = amp_scaler_scale(scaler, loss);
            amp_grad(&scaled, 1, NULL, params, 4, ref, false, false);
            for (int i = 0; i < 4; i++) {
                const float *a = amp_tensor_data(amp_tensor_grad(params[i])), *r = amp_tensor_data(ref[i]);
                double mx = 0, d = 0;
                for (int64_t k = 0; k < amp_tensor_numel(ref[i]); k++) {
                    mx = fmax(mx, fabs(r[k]));
                    d = fmax(d, fabs(a[k] - r[k]));
                }
                worst = fmax(worst, d / mx);
            }
            first = amp_tensor_item(loss);
        }
        amp_scaler_step(scaler, opt, NULL);
        amp_scaler_update(scaler);
        amp_scope_end(s);
    }
    /* the loss of the stepped model at the end, on one thread */
    amp_scope *s = amp_scope_begin();
    last = amp_tensor_item(amp_cross_entropy(amp_module_forward(model, x), y, NULL));
    amp_scope_end(s);
    printf("threads_autocast: %d workers, autocast on in each and off in main: %s; averaged vs whole-batch gradient: "
           "max difference %.1e of the largest; loss %.3f -> %.3f\n",
           WORKERS, ok ? "yes" : "NO", worst, first, last);
    pthread_barrier_destroy(&inside);
    amp_scaler_free(scaler);
    amp_optim_free(opt);
    for (int k = 0; k < WORKERS; k++) amp_module_free(replicas[k]);
    amp_module_free(model);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return ok && worst < 5e-3 && last < 0.3 * first ? 0 : 1;
}
