/* Parameter initialisation (torch.nn.init in C): functions that fill a tensor in place.
 *
 * Each cg_init_*_ function writes every element of t and returns CG_OK, or returns another status
 * with t unchanged and cg_last_error() naming the function, the argument and why. t is a live
 * tensor of a floating dtype (float32, bfloat16, float16; an integer or bool tensor is
 * CG_ERR_INVALID_ARG) on any device, of any shape; it may require grad (a module's parameter from
 * cg_module_parameter, written where it lives), and it may be a view such as a transpose. The
 * write is not recorded on the tape (grad mode is off inside, as under torch.no_grad). A
 * zero-element tensor is left as it is and gives CG_OK once the arguments are valid (PyTorch warns
 * "Initializing zero-element tensors is a no-op"; cgrad says nothing).
 *
 * Values are computed in float32 and rounded once to t's dtype, so a bound a or b holds as the
 * dtype rounds it: float32 values lie in [(float)a, (float)b]. Random draws come from t's device's
 * generator: after cg_manual_seed the same calls give the same values on the same device. */
#ifndef CGRAD_INIT_H
#define CGRAD_INIT_H

#include "cgrad/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- gains and fans ---------------------------------------------------------------------------- */
/* The nonlinearities of torch.nn.init.calculate_gain. */
typedef enum cg_nonlinearity {
    CG_NONLINEARITY_LINEAR = 0,
    CG_NONLINEARITY_CONV1D,
    CG_NONLINEARITY_CONV2D,
    CG_NONLINEARITY_CONV3D,
    CG_NONLINEARITY_CONV_TRANSPOSE1D,
    CG_NONLINEARITY_CONV_TRANSPOSE2D,
    CG_NONLINEARITY_CONV_TRANSPOSE3D,
    CG_NONLINEARITY_SIGMOID,
    CG_NONLINEARITY_TANH,
    CG_NONLINEARITY_RELU,
    CG_NONLINEARITY_LEAKY_RELU,
    CG_NONLINEARITY_SELU,
} cg_nonlinearity;

/* calculate_gain's negative slope for leaky_relu when param is None. */
#define CG_INIT_LEAKY_RELU_SLOPE 0.01

/* torch.nn.init.calculate_gain: 1 for linear, the convolutions and sigmoid; 5/3 for tanh;
 * sqrt(2) for relu; sqrt(2 / (1 + param^2)) for leaky_relu, param being the negative slope (pass
 * CG_INIT_LEAKY_RELU_SLOPE for PyTorch's default); 3/4 for selu. param is read for leaky_relu only,
 * where it must be finite. NaN (error recorded) for a value that is no cg_nonlinearity or a
 * non-finite slope. */
CG_API double cg_init_calculate_gain(cg_nonlinearity nonlinearity, double param);

/* PyTorch's _calculate_fan_in_and_fan_out for a weight (out, in, k1, k2, ...): fan_in = in * k1 *
 * k2 * ..., fan_out = out * k1 * k2 * .... t of any dtype with at least 2 dims (fewer is
 * CG_ERR_SHAPE naming the shape); fan_in and fan_out are written on success. */
CG_API cg_status cg_init_calculate_fan_in_and_fan_out(const cg_tensor *t, int64_t *fan_in, int64_t *fan_out);

/* Which fan kaiming_*_ scales by: fan_in keeps the forward pass's variance, fan_out the backward's. */
typedef enum cg_fan_mode { CG_FAN_IN = 0, CG_FAN_OUT } cg_fan_mode;

/* ---- fills --------------------------------------------------------------------------------------- */
/* U(a, b). a and b are finite, within t's dtype's range, a <= b and b - a at most the dtype's
 * largest value (PyTorch's uniform_ checks). */
CG_API cg_status cg_init_uniform_(cg_tensor *t, double a, double b);
/* N(mean, std^2); std >= 0 (0 fills mean). mean and std must be finite floats: PyTorch would fill
 * infinities or NaN, cgrad refuses them. */
CG_API cg_status cg_init_normal_(cg_tensor *t, double mean, double std);
/* N(mean, std^2) truncated to [a, b]: every value lies in [a, b] (a = -INFINITY or b = INFINITY
 * leaves that side open), distributed as the normal restricted to it. std > 0 and a < b (PyTorch
 * divides by std, and with a > b its uniform_ fails). Values outside [a, b] are drawn again until
 * none remain, from the normal itself or, when it accepts more often, uniformly over [a, b] kept
 * with probability proportional to the normal's density; an interval so wide and so far in a tail
 * that neither could finish in 1000 rounds but with a chance below 1e-6 is CG_ERR_INVALID_ARG,
 * saying how likely a draw lands in it (PyTorch's inverse-CDF method goes on and returns values
 * piled at the bounds there). Each round reads a count back from the device. */
CG_API cg_status cg_init_trunc_normal_(cg_tensor *t, double mean, double std, double a, double b);
/* value everywhere. A finite value must be within the dtype's range (PyTorch's fill_ refuses one
 * that overflows it); infinities and NaN are written as they are. */
CG_API cg_status cg_init_constant_(cg_tensor *t, double value);
CG_API cg_status cg_init_zeros_(cg_tensor *t);
CG_API cg_status cg_init_ones_(cg_tensor *t);

/* ---- scaled by the fans (t has at least 2 dims: fewer is CG_ERR_SHAPE naming the shape) ---------- */
/* xavier_uniform_: U(-bound, bound), bound = gain sqrt(6 / (fan_in + fan_out)); gain >= 0, finite. */
CG_API cg_status cg_init_xavier_uniform_(cg_tensor *t, double gain);
/* xavier_normal_: N(0, std^2), std = gain sqrt(2 / (fan_in + fan_out)); gain >= 0, finite. */
CG_API cg_status cg_init_xavier_normal_(cg_tensor *t, double gain);
/* kaiming_uniform_: U(-bound, bound), bound = gain sqrt(3 / fan), with gain =
 * cg_init_calculate_gain(nonlinearity, a) and fan as mode says. PyTorch's defaults are a = 0,
 * CG_FAN_IN, CG_NONLINEARITY_LEAKY_RELU (a gain of sqrt(2)). */
CG_API cg_status cg_init_kaiming_uniform_(cg_tensor *t, double a, cg_fan_mode mode, cg_nonlinearity nonlinearity);
/* kaiming_normal_: N(0, std^2), std = gain / sqrt(fan), gain and fan as for kaiming_uniform_. */
CG_API cg_status cg_init_kaiming_normal_(cg_tensor *t, double a, cg_fan_mode mode, cg_nonlinearity nonlinearity);

#ifdef __cplusplus
}
#endif
#endif
