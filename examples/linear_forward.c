/* The seed's nn.Linear snippet, in C:
 *
 *   model = torch.nn.Linear(10, 1).to(device)
 *   input_data = torch.randn(5, 10).to(device)
 *   output = model(input_data)
 *   output
 */
#include <math.h>
#include <stdio.h>

#include "cgrad.h"
#include "example_util.h"

int main(int argc, char **argv) {
    /* device = torch.device("cuda" if torch.cuda.is_available() else "cpu") */
    cg_device device = cg_default_device();
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &device, 0, "where the model and the data go"},
    };
    eu_parse_flags(argc, argv, "nn.Linear(10, 1).to(device) applied to randn(5, 10).to(device)",
                   flags, 1);
    if (device.type == CG_CPU && !cg_cuda_is_available())
        printf("no GPU: %s. Running on the CPU.\n", cg_cuda_unavailable_reason());
    cg_manual_seed(0); /* one seed makes the run reproducible */

    /* model = torch.nn.Linear(10, 1).to(device) */
    cg_module *model = cg_linear_new(10, 1, true, cg_cpu());
    eu_expect(model != NULL, cg_last_error());
    CHECK_OK(cg_module_to(model, device));

    /* input_data = torch.randn(5, 10).to(device) */
    cg_tensor *input_cpu = CHECK(cg_randn(CG_SHAPE(5, 10), cg_cpu()));
    cg_tensor *input_data = CHECK(cg_to(input_cpu, device));

    /* output = model(input_data) */
    cg_tensor *output = CHECK(cg_module_forward(model, input_data));

    /* output */
    CHECK_OK(cg_print(output));

    /* Check: output == input_data @ weight^T + bias, computed on the host in double. */
    float x[5 * 10], w[10], b[1], y[5];
    CHECK_OK(cg_to_host(input_cpu, x, 50));
    CHECK_OK(cg_to_host(CHECK(cg_module_parameter(model, 0, NULL)), w, 10)); /* weight (1, 10) */
    CHECK_OK(cg_to_host(CHECK(cg_module_parameter(model, 1, NULL)), b, 1));  /* bias (1) */
    CHECK_OK(cg_to_host(output, y, 5));
    for (int i = 0; i < 5; i++) {
        double ref = b[0];
        for (int k = 0; k < 10; k++) ref += (double)x[i * 10 + k] * (double)w[k];
        eu_expect(fabs(y[i] - ref) <= 1e-5 * (1.0 + fabs(ref)), "output == input @ weight^T + bias");
    }
    eu_expect(cg_size(output, 0) == 5 && cg_size(output, 1) == 1, "output has shape (5, 1)");
    eu_expect(cg_device_equal(cg_device_of(output), device), "output is on the chosen device");

    cg_tensor_free(output);
    cg_tensor_free(input_data);
    cg_tensor_free(input_cpu);
    cg_module_free(model);
    return 0;
}
