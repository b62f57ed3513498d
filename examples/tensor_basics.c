/* The seed's first PyTorch snippet, in C:
 *
 *   device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
 *   tensor = torch.tensor([1.0, 2.0, 3.0])
 *   tensor = tensor.to(device)
 *   result = tensor * 2
 *   result, result.device
 */
#include <stdio.h>

#include "cgrad.h"
#include "example_util.h"

int main(int argc, char **argv) {
    /* The best device present: cuda:0 when there is a GPU, else the CPU (the seed's choice). */
    cg_device device = cg_default_device();
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &device, 0, "where the tensor goes"},
    };
    eu_parse_flags(argc, argv, "torch.tensor([1., 2., 3.]).to(device) * 2", flags, 1);
    if (device.type == CG_CPU && !cg_cuda_is_available())
        printf("no GPU: %s. Running on the CPU.\n", cg_cuda_unavailable_reason());

    /* Define a tensor (on the CPU, as torch.tensor does) */
    const float data[] = {1.0f, 2.0f, 3.0f};
    cg_tensor *tensor = CHECK(cg_from_data(data, CG_SHAPE(3), cg_cpu()));

    /* Move it to the device: an explicit copy, never a hidden one */
    cg_tensor *on_device = CHECK(cg_to(tensor, device));

    /* Perform the operation on the device */
    cg_tensor *result = CHECK(cg_mul_scalar(on_device, 2.0f));

    /* Look at the result, and check that it really landed on the device */
    CHECK_OK(cg_print(result));
    char dev[32];
    printf("result.device: %s\n", cg_device_str(cg_device_of(result), dev, sizeof dev));

    float back[3];
    CHECK_OK(cg_to_host(result, back, 3));
    eu_expect(back[0] == 2.0f && back[1] == 4.0f && back[2] == 6.0f, "result == [2, 4, 6]");
    eu_expect(cg_device_equal(cg_device_of(result), device), "result is on the chosen device");

    cg_tensor_free(result);
    cg_tensor_free(on_device);
    cg_tensor_free(tensor);
    return 0;
}
