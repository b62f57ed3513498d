// cuDNN's fused attention through its C++ graph API (cudnn-frontend, header-only): one graph per key
// (src/cuda/cudnn_attention.h: geometry and direction), built on first use and kept per device, since a
// training step asks for one or two. The only C++ in the library, as the frontend is a C++ API; the
// backend's side (context, workspace, errors) is src/cuda/cuda_attention.c.
#include "cuda/cudnn_attention.h"

#include <cudnn_frontend.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSeed, kOffset };

struct Plan {
    cg_fe_sdpa_key key;
    std::shared_ptr<fe::graph::Graph> graph; // null when cuDNN cannot run the key
    int64_t workspace;
};

// Per device, the most recently made last; the oldest goes when there are kMaxPlans.
constexpr size_t kMaxPlans = 32;
std::vector<std::vector<std::unique_ptr<Plan>>> plans;

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

TensorPtr tensor(fe::graph::Graph &g, const char *name, Uid uid, const std::vector<int64_t> &dim,
                 const std::vector<int64_t> &stride, fe::DataType_t type) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride).set_data_type(
        type));
}

std::vector<int64_t> strides(const int64_t *s) { return {s[0], s[1], s[2], s[3]}; }
// A contiguous (b, h, n, e) tensor's strides.
std::vector<int64_t> packed(const cg_fe_sdpa_key &k, int64_t n) { return {k.h * n * k.e, n * k.e, k.e, 1}; }

// The graph of k on handle: forward o and stats from q, k, v; backward dq, dk, dv from those, o, d_o and stats;
// with dropout, both from the seed and offset given at each run.
fe::error_t build(cudnnHandle_t handle, const cg_fe_sdpa_key &k, fe::graph::Graph &g) {
    const fe::DataType_t io = k.bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF, f32 = fe::DataType_t::FLOAT;
    g.set_io_data_type(io).set_intermediate_data_type(f32).set_compute_data_type(f32);
    const std::vector<int64_t> qdim{k.b, k.h, k.l, k.e}, kvdim{k.b, k.h, k.s, k.e}, sdim{k.b, k.h, k.l, 1},
        sstride{k.h * k.l, k.l, 1, 1};
    TensorPtr q = tensor(g, "q", kQ, qdim, strides(k.q_stride), io), kt = tensor(g, "k", kK, kvdim, strides(k.k_stride), io),
              v = tensor(g, "v", kV, kvdim, strides(k.v_stride), io), seed, offset;
    if (k.dropout > 0.0f) { // the generator's position, read from the host at each run
        const std::vector<int64_t> one{1, 1, 1, 1};
        seed = g.tensor(fe::graph::Tensor_attributes().set_name("seed").set_uid(kSeed).set_dim(one).set_stride(one)
                            .set_data_type(fe::DataType_t::INT64).set_is_pass_by_value(true));
        offset = g.tensor(fe::graph::Tensor_attributes().set_name("offset").set_uid(kOffset).set_dim(one).set_stride(one)
                              .set_data_type(fe::DataType_t::INT64).set_is_pass_by_value(true));
    }
    if (!k.backward) {
        auto options = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_causal_mask(k.causal)
                           .set_attn_scale(k.scale);
        if (seed) options.set_dropout(k.dropout, seed, offset);
        auto [o, stats] = g.sdpa(q, kt, v, options);
        o->set_output(true).set_uid(kO).set_dim(qdim).set_stride(packed(k, k.l)).set_data_type(io);
        stats->set_output(true).set_uid(kStats).set_dim(sdim).set_stride(sstride).set_data_type(f32);
    } else {
        TensorPtr o = tensor(g, "o", kO, qdim, packed(k, k.l), io), d_o = tensor(g, "d_o", kDO, qdim, packed(k, k.l), io),
                  stats = tensor(g, "stats", kStats, sdim, sstride, f32);
        auto options = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_causal_mask(k.causal)
                           .set_attn_scale(k.scale).set_deterministic_algorithm(k.deterministic);
        if (seed) options.set_dropout(k.dropout, seed, offset);
        auto [dq, dk, dv] = g.sdpa_backward(q, kt, v, o, d_o, stats, options);
        dq->set_output(true).set_uid(kDQ).set_dim(qdim).set_stride(packed(k, k.l)).set_data_type(io);
        dk->set_output(true).set_uid(kDK).set_dim(kvdim).set_stride(packed(k, k.s)).set_data_type(io);
        dv->set_output(true).set_uid(kDV).set_dim(kvdim).set_stride(packed(k, k.s)).set_data_type(io);
    }
    return g.build(handle, {fe::HeurMode_t::A});
}

void say(char *why, size_t len, const std::string &what) { std::snprintf(why, len, "%s", what.c_str()); }

}  // namespace

extern "C" cg_fe_status cg_fe_sdpa_plan(cudnnHandle_t handle, int device, const cg_fe_sdpa_key *key, const void **plan,
                                        int64_t *workspace, char *why, size_t why_len) {
    try {
        if (plans.size() <= (size_t)device) plans.resize((size_t)device + 1);
        std::vector<std::unique_ptr<Plan>> &mine = plans[(size_t)device];
        const Plan *found = nullptr;
        for (const auto &p : mine)
            if (std::memcmp(&p->key, key, sizeof *key) == 0) found = p.get();
        if (!found) {
            auto p = std::make_unique<Plan>(Plan{*key, std::make_shared<fe::graph::Graph>(), 0});
            fe::error_t st = build(handle, *key, *p->graph);
            if (st.is_good()) st = p->graph->get_workspace_size(p->workspace);
            if (st.is_bad()) say(why, why_len, st.get_message()), p->graph.reset();
            if (mine.size() == kMaxPlans) mine.erase(mine.begin());
            mine.push_back(std::move(p));
            found = mine.back().get();
        }
        *plan = found, *workspace = found->workspace;
        if (!found->graph && why_len && !why[0]) say(why, why_len, "cuDNN could not build this attention before");
        return found->graph ? CG_FE_OK : CG_FE_UNSUPPORTED;
    } catch (const std::bad_alloc &) {
        return CG_FE_OOM;
    } catch (const std::exception &e) { // the frontend's own, e.g. from its JSON
        return say(why, why_len, e.what()), CG_FE_UNSUPPORTED;
    }
}

extern "C" cg_fe_status cg_fe_sdpa_execute(cudnnHandle_t handle, const void *plan, void *const tensors[CG_FE_SDPA_TENSORS],
                                           void *workspace, char *why, size_t why_len) {
    try {
        const Plan *p = static_cast<const Plan *>(plan);
        void *pack[CG_FE_SDPA_TENSORS]; // the graph's tensors in uid order, as the frontend takes them without a map
        int n = 0;
        for (int i = 0; i < CG_FE_SDPA_TENSORS; i++)
            if (tensors[i]) pack[n++] = tensors[i];
        fe::error_t st = p->graph->execute(handle, pack, n, workspace);
        if (st.is_bad()) return say(why, why_len, st.get_message()), CG_FE_FAILED;
        return CG_FE_OK;
    } catch (const std::bad_alloc &) {
        return CG_FE_OOM;
    } catch (const std::exception &e) {
        return say(why, why_len, e.what()), CG_FE_FAILED;
    }
}
