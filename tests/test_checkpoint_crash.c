/* Crash safety of checkpoint saves: a child process saves checkpoints in a
 * loop (each save with distinct contents: every value of iteration k is
 * derived from k) and is killed with SIGKILL at random moments. After every
 * kill the directory must open (checksums, ids of the two files agreeing,
 * an interrupted commit rolled forward) and restore a state that is exactly
 * one of the saved iterations, never older than the last one verified. The
 * test counts how many kills left temporary files behind, i.e. landed inside
 * a save, and requires that some did. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_support.h"

typedef struct {
    amp_module *model;
    amp_optim *opt;
    amp_scaler *sc;
    amp_generator gen;
} rig;

static void rig_make(rig *r) {
    r->gen = amp_generator_make(1);
    r->model = amp_nn_linear(256, 512, true, &r->gen);
    amp_optim_opts o = amp_adam_opts(1e-3);
    r->opt = test_optim_new(r->model, &o);
    r->sc = amp_scaler_new(NULL);
}

static void rig_free(rig *r) {
    amp_scaler_free(r->sc);
    amp_optim_free(r->opt);
    amp_module_free(r->model);
}

/* Iteration k's contents. */
static int rig_fill(rig *r, int64_t k) {
    for (int i = 0; i < 2; i++) {
        amp_tensor *p = amp_optim_param(r->opt, i);
        amp_tensor *src = amp_tensor_full(AMP_F32, amp_tensor_ndim(p), amp_tensor_shape(p), (double)k);
        if (amp_tensor_copy_(p, src)) return -1;
        if (amp_tensor_fill_(src, (double)k + 0.5) || amp_optim_load_state(r->opt, i, "exp_avg", src)) return -1;
        if (amp_tensor_fill_(src, (double)k + 0.25) || amp_optim_load_state(r->opt, i, "exp_avg_sq", src)) return -1;
        amp_tensor_free(src);
        amp_optim_set_param_steps(r->opt, i, k);
    }
    amp_optim_set_steps(r->opt, k);
    amp_scaler_state ss;
    amp_scaler_state_get(r->sc, &ss);
    ss.scale = (double)(1 << (k % 20));
    ss.num_updates = k;
    amp_scaler_state_set(r->sc, &ss);
    r->gen.offset = (uint64_t)k * 3;
    return 0;
}

static int save_iter(rig *r, const char *dir, int64_t k) {
    if (rig_fill(r, k)) return -1;
    char iter[32];
    snprintf(iter, sizeof iter, "%lld", (long long)k);
    amp_kv meta[] = {{"iter", iter}};
    amp_train_state s = {r->model, &r->opt, 1, r->sc, &r->gen, NULL, k, meta, 1};
    return amp_checkpoint_save(dir, &s) == AMP_OK ? 0 : -1;
}

static bool all_equal(amp_tensor *t, float v) {
    const float *p = amp_tensor_data(t);
    for (int64_t i = 0; i < amp_tensor_numel(t); i++)
        if (p[i] != v) return false;
    return true;
}

/* Opens and verifies; returns the iteration found. */
static int64_t verify(const char *dir) {
    amp_checkpoint *c = amp_checkpoint_open(dir);
    if (!c) fail_msg("checkpoint does not open after a kill: %s", amp_last_error());
    int64_t k = atoll(amp_checkpoint_meta(c, "iter"));
    assert_string_equal(amp_safetensors_meta(amp_checkpoint_model_file(c), "iter"), amp_checkpoint_meta(c, "iter"));
    rig r;
    rig_make(&r);
    amp_train_state s = {r.model, &r.opt, 1, r.sc, &r.gen, NULL, 0, NULL, 0};
    if (amp_checkpoint_restore(c, &s) != AMP_OK) fail_msg("restore after a kill: %s", amp_last_error());
    assert_int_equal(s.step, k);
    for (int i = 0; i < 2; i++) {
        assert_true(all_equal(amp_optim_param(r.opt, i), (float)k));
        assert_true(all_equal(amp_optim_state(r.opt, i, "exp_avg"), (float)k + 0.5f));
        assert_true(all_equal(amp_optim_state(r.opt, i, "exp_avg_sq"), (float)k + 0.25f));
        assert_int_equal(amp_optim_param_steps(r.opt, i), k);
    }
    assert_int_equal(amp_optim_steps(r.opt), k);
    assert_true(amp_scaler_get_scale(r.sc) == (double)(1 << (k % 20)));
    assert_int_equal(amp_scaler_num_updates(r.sc), k);
    assert_true(r.gen.offset == (uint64_t)k * 3);
    rig_free(&r);
    amp_checkpoint_close(c);
    return k;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void t_sigkill_during_saves(void **state) {
    (void)state;
    char *root = test_mkdtemp();
    char dir[1100], mt[1200], st[1200];
    snprintf(dir, sizeof dir, "%s/ck", root);
    snprintf(mt, sizeof mt, "%s/model.safetensors.tmp", dir);
    snprintf(st, sizeof st, "%s/training_state.safetensors.tmp", dir);
    rig r;
    rig_make(&r);
    assert_int_equal(save_iter(&r, dir, 0), 0);
    rig_free(&r);
    /* how long one save takes here, to aim the kills */
    double t0 = now_s();
    rig_make(&r);
    assert_int_equal(save_iter(&r, dir, 1), 0);
    rig_free(&r);
    double save_s = now_s() - t0;
    print_message("one save: %.1f ms\n", save_s * 1e3);

    test_rng rng = {20240611};
    int64_t last = verify(dir), kills = 0, mid_save = 0, progressed = 0, between = 0;
    /* Counted, not timed: a loaded machine (CI, sanitizers) only makes each
     * round slower. At least 40 kills, then on until the kills have landed
     * both inside saves and after progress often enough (bounded). */
    while (kills < 40 || ((mid_save < 3 || progressed < 3) && kills < 2000)) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            rig c;
            rig_make(&c);
            for (int64_t k = last + 1;; k++)
                if (save_iter(&c, dir, k)) _exit(3);
        }
        /* somewhere within the first few saves, at a random phase */
        double wait = test_rng_uniform(&rng) * (save_s * 4 + 0.002);
        struct timespec ts = {0, (long)(wait * 1e9)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int ws;
        assert_int_equal(waitpid(pid, &ws, 0), pid);
        if (!WIFSIGNALED(ws)) fail_msg("the saving child exited by itself (status %d): a save failed", WEXITSTATUS(ws));
        kills++;
        if (access(mt, F_OK) == 0 || access(st, F_OK) == 0) mid_save++;
        if (access(st, F_OK) == 0) {
            /* killed between the two renames? then the two files disagree until open() rolls forward */
            char mp[1200], sp[1200];
            snprintf(mp, sizeof mp, "%s/model.safetensors", dir);
            snprintf(sp, sizeof sp, "%s/training_state.safetensors", dir);
            amp_safetensors *a = amp_safetensors_read(mp), *b = amp_safetensors_read(sp);
            if (a && b && strcmp(amp_safetensors_meta(a, "checkpoint_id"), amp_safetensors_meta(b, "checkpoint_id"))) between++;
            amp_safetensors_free(a);
            amp_safetensors_free(b);
        }
        int64_t k = verify(dir);
        if (k < last) fail_msg("after kill %lld the checkpoint went back from iteration %lld to %lld", (long long)kills, (long long)last,
                               (long long)k);
        if (k > last) progressed++;
        last = k;
    }
    print_message("%lld kills, %lld left temporary files, %lld between the two renames (rolled forward), %lld with progress; "
                  "last iteration %lld\n",
                  (long long)kills, (long long)mid_save, (long long)between, (long long)progressed, (long long)last);
    assert_true(mid_save >= 3);
    assert_true(progressed >= 3);
    test_rmtree(root);
    free(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_sigkill_during_saves),
    };
    amp_test_prepare();
    amp_set_num_threads(1); /* the children use no OpenMP thread pool inherited across fork */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
