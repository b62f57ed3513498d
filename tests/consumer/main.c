/* A program outside the cgrad tree, built against an installed cgrad only (scripts/ci_consumer.sh):
 * nn.Linear(2, 1) with known weights, a forward, an MSE loss and a backward on the CPU, checked by
 * hand. Exits 0 when every number matches, 1 otherwise.
 *
 * With CMake:      cmake -S tests/consumer -B build -DCMAKE_PREFIX_PATH=<prefix>  (find_package(cgrad))
 * With pkg-config: export PKG_CONFIG_PATH=<prefix>/lib/pkgconfig
 *                  cc main.c $(pkg-config --cflags --libs cgrad) -Wl,-rpath,$(pkg-config --variable=libdir cgrad)
 * Static: link <libdir>/libcgrad.a and $(pkg-config --static --libs cgrad) without -lcgrad, or
 *         cgrad::cgrad_static with CMake. */
#include <stdio.h>

#include <cgrad.h>

static int failures;

static void expect_near(const char *what, float got, float want) {
    float diff = got - want;
    if (!(diff >= -1e-6f && diff <= 1e-6f)) {
        fprintf(stderr, "consumer: %s = %g, expected %g\n", what, got, want);
        failures++;
    }
}

/* Stops at the first failing call, naming it and cgrad's message. */
#define CHECK(call)                                                                  \
    do {                                                                             \
        if (!(call)) {                                                               \
            fprintf(stderr, "consumer: %s failed: %s\n", #call, cg_last_error());    \
            return 1;                                                                \
        }                                                                            \
    } while (0)

int main(void) {
    /* Linear(2, 1): weight [[1, 2]], bias [0.5], set without recording on the tape. */
    cg_module *linear;
    CHECK(linear = cg_linear_new(2, 1, true, cg_cpu()));
    const float w[] = {1.0f, 2.0f}, b[] = {0.5f};
    cg_tensor *w_src, *b_src;
    CHECK(w_src = cg_from_data(w, CG_SHAPE(1, 2), cg_cpu()));
    CHECK(b_src = cg_from_data(b, CG_SHAPE(1), cg_cpu()));
    bool grad_mode = cg_set_grad_enabled(false);
    CHECK(cg_copy_(cg_module_parameter(linear, 0, NULL), w_src) == CG_OK);
    CHECK(cg_copy_(cg_module_parameter(linear, 1, NULL), b_src) == CG_OK);
    cg_set_grad_enabled(grad_mode);

    /* x = [[1, 1], [2, 0]] -> y = [3.5, 2.5]; target 3 -> loss = (0.5^2 + 0.5^2) / 2 = 0.25;
     * dloss/dy = 2 (y - t) / 2 = [0.5, -0.5] -> dweight = 0.5 [1, 1] - 0.5 [2, 0] = [-0.5, 0.5],
     * dbias = 0.5 - 0.5 = 0. */
    const float x_data[] = {1.0f, 1.0f, 2.0f, 0.0f}, t_data[] = {3.0f, 3.0f};
    cg_scope *step = cg_scope_begin();
    cg_tensor *x, *target, *y, *loss;
    CHECK(x = cg_from_data(x_data, CG_SHAPE(2, 2), cg_cpu()));
    CHECK(target = cg_from_data(t_data, CG_SHAPE(2, 1), cg_cpu()));
    CHECK(y = cg_module_forward(linear, x));
    CHECK(loss = cg_mse_loss(y, target, CG_REDUCTION_MEAN));
    CHECK(cg_backward(loss) == CG_OK);

    float y_host[2], loss_value, dw[2], db;
    CHECK(cg_to_host(y, y_host, 2) == CG_OK);
    CHECK(cg_item(loss, &loss_value) == CG_OK);
    CHECK(cg_to_host(cg_grad(cg_module_parameter(linear, 0, NULL)), dw, 2) == CG_OK);
    CHECK(cg_item(cg_grad(cg_module_parameter(linear, 1, NULL)), &db) == CG_OK);
    expect_near("y[0]", y_host[0], 3.5f);
    expect_near("y[1]", y_host[1], 2.5f);
    expect_near("loss", loss_value, 0.25f);
    expect_near("dweight[0]", dw[0], -0.5f);
    expect_near("dweight[1]", dw[1], 0.5f);
    expect_near("dbias", db, 0.0f);
    cg_scope_end(step);

    cg_tensor_free(w_src);
    cg_tensor_free(b_src);
    cg_module_free(linear);
    if (failures) return 1;
    printf("consumer: Linear(2, 1) forward, MSE loss %.2f and backward match\n", loss_value);
    return 0;
}
