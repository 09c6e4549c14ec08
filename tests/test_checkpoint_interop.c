/* Interop and the checkpoint commands:
 *   - tests/data/torch_mlp_f16.safetensors, written by PyTorch
 *     (tools/golden/gen_safetensors.py: state_dict order, no padding, F16,
 *     misaligned data), loads into amp's mlp and gives PyTorch's predictions
 *     on the first 1000 Fashion-MNIST test images, hence its accuracy;
 *   - `amp predict` prints the same accuracy, and the trainer's own test
 *     accuracy for a checkpoint it saved;
 *   - `amp inspect` lists tensors and metadata, validates checkpoints, and
 *     follows the exit-code conventions (0 ok, 1 bad file, 2 bad usage).
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * amp processes inherit AMP_CPU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

#define TORCH_FILE AMP_TEST_DATA_DIR "/torch_mlp_f16.safetensors"

static void t_torch_file_same_predictions(void **state) {
    (void)state;
    amp_safetensors *f = amp_safetensors_read(TORCH_FILE);
    if (!f) fail_msg("%s", amp_last_error());
    assert_string_equal(amp_safetensors_meta(f, "format"), "pt");
    const char *want = amp_safetensors_meta(f, "test_predictions_first_1000");
    const char *correct_s = amp_safetensors_meta(f, "test_correct_first_1000");
    assert_non_null(want);
    assert_non_null(correct_s);
    assert_int_equal(strlen(want), 1000);
    /* the writer's data really is misaligned for F16 (exercises the copying path) */
    amp_safetensors_info in;
    assert_int_equal(amp_safetensors_info_at(f, 0, &in), AMP_OK);
    assert_string_equal(in.name, "1.weight");
    assert_string_equal(in.dtype_name, "F16");
    assert_int_equal((uintptr_t)in.data % 2, 1);

    amp_generator g = amp_generator_make(123);
    amp_module *m = amp_model_build("mlp", &g);
    if (amp_module_load_safetensors(m, f) != AMP_OK) fail_msg("%s", amp_last_error());
    /* values: exactly the f16 numbers widened */
    amp_tensor *w = amp_safetensors_get(f, "1.weight");
    amp_tensor *ps[8];
    amp_module_parameters(m, ps, NULL, 8);
    const uint16_t *h = amp_tensor_data(w);
    const float *p = amp_tensor_data(ps[0]);
    for (int64_t i = 0; i < amp_tensor_numel(w); i++)
        if (p[i] != amp_f16_to_f32(h[i])) fail_msg("1.weight[%lld] differs", (long long)i);
    amp_tensor_free(w);

    amp_dataset test;
    assert_int_equal(amp_fashion_mnist_load("test", 1000, &test), AMP_OK);
    amp_loader_opts lo = {.batch = 250, .shuffle = false};
    amp_loader *l = amp_loader_new(&test, &lo);
    amp_module_train(m, false);
    amp_no_grad_begin();
    int64_t done = 0, correct = 0, differ = 0;
    for (;;) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *x, *y, *idx = NULL;
        if (!amp_loader_next(l, &x, &y)) {
            amp_scope_end(s);
            break;
        }
        amp_tensor *logits = amp_module_forward(m, x);
        assert_non_null(amp_max(logits, 1, false, &idx));
        const int64_t *pi = amp_tensor_data(idx), *py = amp_tensor_data(y);
        for (int64_t i = 0; i < amp_tensor_dim(y, 0); i++) {
            correct += pi[i] == py[i];
            if (pi[i] != want[done + i] - '0') {
                differ++;
                print_message("image %lld: amp predicts %lld, PyTorch %c\n", (long long)(done + i), (long long)pi[i], want[done + i]);
            }
        }
        done += amp_tensor_dim(y, 0);
        amp_scope_end(s);
    }
    amp_no_grad_end();
    assert_int_equal(done, 1000);
    assert_int_equal(differ, 0);
    assert_int_equal(correct, atoi(correct_s));
    amp_loader_free(l);
    amp_dataset_free(&test);
    amp_module_free(m);
    amp_safetensors_free(f);
}

static void t_predict_cli(void **state) {
    (void)state;
    char args[4096];
    const char *dir = amp_fashion_mnist_dir();
    snprintf(args, sizeof args, "predict --checkpoint %s --input %s/t10k-images-idx3-ubyte.gz --labels %s/t10k-labels-idx1-ubyte.gz --limit 1000",
             TORCH_FILE, dir, dir);
    char *out = test_run_cli_expect(0, NULL, "%s", args);
    amp_safetensors *f = amp_safetensors_read(TORCH_FILE);
    char want[64];
    snprintf(want, sizeof want, "(%s/1000) mlp, fp32", amp_safetensors_meta(f, "test_correct_first_1000"));
    if (!strstr(out, want)) fail_msg("expected '%s' in: %s", want, out);
    free(out);
    /* predictions without labels: one class per line, PyTorch's */
    snprintf(args, sizeof args, "predict --checkpoint %s --input %s/t10k-images-idx3-ubyte.gz --limit 20", TORCH_FILE, dir);
    out = test_run_cli_expect(0, NULL, "%s", args);
    const char *pred = amp_safetensors_meta(f, "test_predictions_first_1000");
    char *save, *line = strtok_r(out, "\n", &save);
    for (int i = 0; i < 20; i++, line = strtok_r(NULL, "\n", &save)) {
        assert_non_null(line);
        assert_int_equal(atoi(line), pred[i] - '0');
    }
    assert_null(line);
    free(out);
    /* half precision inference runs (autocast) and stays close */
    snprintf(args, sizeof args, "predict --checkpoint %s --input %s/t10k-images-idx3-ubyte.gz --labels %s/t10k-labels-idx1-ubyte.gz --limit 1000 --precision bf16",
             TORCH_FILE, dir, dir);
    out = test_run_cli_expect(0, NULL, "%s", args);
    double acc = atof(strstr(out, "accuracy ") + 9);
    assert_true(acc > 100.0 * atof(amp_safetensors_meta(f, "test_accuracy_first_1000")) - 2.0);
    free(out);
    amp_safetensors_free(f);

    /* errors */
    char *err;
    snprintf(args, sizeof args, "predict --checkpoint %s --input %s/t10k-images-idx3-ubyte.gz --model cnn", TORCH_FILE, dir);
    free(test_run_cli_expect(1, &err, "%s", args));
    assert_non_null(strstr(err, "tensor '0.weight' is missing"));
    free(err);
    snprintf(args, sizeof args, "predict --checkpoint %s", TORCH_FILE);
    free(test_run_cli_expect(2, &err, "%s", args));
    assert_non_null(strstr(err, "--input is required"));
    free(err);
    snprintf(args, sizeof args, "predict --checkpoint %s --input %s/t10k-labels-idx1-ubyte.gz", TORCH_FILE, dir);
    free(test_run_cli_expect(1, &err, "%s", args));
    assert_non_null(strstr(err, "expected u8 or f32 images [N,H,W]"));
    test_free_all(err, test_run_cli_expect(0, NULL, "%s", "predict --help"), test_run_cli_expect(2, NULL, "%s", "predict --precision fp8 --checkpoint x --input y"));
}

static void t_trainer_and_predict_agree(void **state) {
    (void)state;
    char args[4096];
    snprintf(args, sizeof args, "train --model cnn --limit 256 --batch 64 --test-limit 1000 --quiet --threads 2 --checkpoint %s/cnn", test_tmpdir);
    char *out = test_run_cli_expect(0, NULL, "%s", args);
    const char *acc = strstr(out, "test accuracy");
    assert_non_null(acc);
    char want[32];
    double a = atof(acc + strlen("test accuracy"));
    snprintf(want, sizeof want, "accuracy %.2f%%", a);
    free(out);
    const char *dir = amp_fashion_mnist_dir();
    snprintf(args, sizeof args, "predict --checkpoint %s/cnn --input %s/t10k-images-idx3-ubyte.gz --labels %s/t10k-labels-idx1-ubyte.gz --limit 1000",
             test_tmpdir, dir, dir);
    out = test_run_cli_expect(0, NULL, "%s", args);
    if (!strstr(out, want)) fail_msg("trainer said %s, predict said %s", want, out);
    assert_non_null(strstr(out, " cnn, fp32")); /* the model came from the metadata */
    free(out);
}

static void t_inspect_cli(void **state) {
    (void)state;
    char args[4096];
    snprintf(args, sizeof args, "inspect %s", TORCH_FILE);
    char *out = test_run_cli_expect(0, NULL, "%s", args);
    assert_non_null(strstr(out, "6 tensors, no checksum recorded"));
    assert_non_null(strstr(out, "1.weight  F16      [512,784]           802816"));
    assert_non_null(strstr(out, "format                       pt"));
    assert_non_null(strstr(out, "total: 6 tensors, 669706 elements"));
    free(out);
    snprintf(args, sizeof args, "inspect --no-tensors %s", TORCH_FILE);
    out = test_run_cli_expect(0, NULL, "%s", args);
    assert_null(strstr(out, "\ntensors:\n"));
    assert_non_null(strstr(out, "total: 6 tensors"));
    free(out);

    /* a checkpoint directory */
    snprintf(args, sizeof args, "train --model mlp --limit 128 --batch 64 --test-limit 100 --quiet --threads 2 --checkpoint %s/ins", test_tmpdir);
    free(test_run_cli_expect(0, NULL, "%s", args));
    snprintf(args, sizeof args, "inspect %s/ins", test_tmpdir);
    out = test_run_cli_expect(0, NULL, "%s", args);
    assert_non_null(strstr(out, "step 2"));
    assert_non_null(strstr(out, "model and training state agree"));
    assert_non_null(strstr(out, "optim.0.1.weight.exp_avg_sq"));
    assert_non_null(strstr(out, "checksum ok (crc32 "));
    free(out);

    /* a corrupt file: exit 1 with the reason */
    char path[1200];
    snprintf(path, sizeof path, "%s/ins/model.safetensors", test_tmpdir);
    size_t n;
    char *raw = test_read_file(path, &n);
    raw[n - 1] ^= 1;
    test_write_file(path, raw, n);
    free(raw);
    char *err;
    snprintf(args, sizeof args, "inspect %s", path);
    free(test_run_cli_expect(1, &err, "%s", args));
    assert_non_null(strstr(err, "checksum mismatch"));
    free(err);
    snprintf(args, sizeof args, "inspect %s/ins", test_tmpdir);
    free(test_run_cli_expect(1, &err, "%s", args));
    assert_non_null(strstr(err, "checksum mismatch"));
    test_free_all(err, test_run_cli_expect(2, NULL, "%s", "inspect"), test_run_cli_expect(2, NULL, "%s", "inspect a b"), test_run_cli_expect(2, NULL, "%s", "inspect --bogus x"), test_run_cli_expect(0, NULL, "%s", "inspect --help"), test_run_cli_expect(1, &err, "%s", "inspect /nonexistent.safetensors"));
    assert_non_null(strstr(err, "cannot open /nonexistent.safetensors"));
    free(err);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_torch_file_same_predictions, t_predict_cli,
                       t_trainer_and_predict_agree, t_inspect_cli)
