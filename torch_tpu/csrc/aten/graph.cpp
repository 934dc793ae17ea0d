// graph.cpp - torch_tpu._bridge.Graph: hands an FX graph's nodes, as Python
// walked them, to the C graph compiler (tpu/graph.h), and runs compiled
// graphs on tpu tensors: checks the inputs against the compiled signature,
// allocates the output buffers, queues one run, and wraps the results.
#include <torch/extension.h>

#include <string>
#include <vector>

#include "bridge.h"

extern "C" {
#include "tpu/graph.h"
}

namespace torch_tpu {
namespace {

tpu_tensor_t meta_of(int dtype, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  TORCH_CHECK_VALUE(sizes.size() == strides.size() && sizes.size() <= TPU_MAX_DIMS,
                    "tpu graph: bad tensor metadata (rank ", sizes.size(), ", ", strides.size(), " strides)");
  tpu_tensor_t m{};
  m.dtype = dtype;
  m.ndim = static_cast<int32_t>(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    m.sizes[d] = sizes[d];
    m.strides[d] = strides[d];
  }
  return m;
}

std::string describe(const tpu_tensor_t& m) {
  std::string s = std::string(tpu_dtype_name(static_cast<tpu_dtype_t>(m.dtype))) + " sizes [";
  for (int32_t d = 0; d < m.ndim; ++d) s += (d ? ", " : "") + std::to_string(m.sizes[d]);
  s += "] strides [";
  for (int32_t d = 0; d < m.ndim; ++d) s += (d ? ", " : "") + std::to_string(m.strides[d]);
  return s + "]";
}

class Graph {
 public:
  explicit Graph(int device) : device_(static_cast<c10::DeviceIndex>(device)) {
    ensure_runtime();
    check(tpu_graph_create(device, &g_));
  }
  ~Graph() { tpu_graph_release(g_); }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  int input(int dtype, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
    tpu_tensor_t m = meta_of(dtype, sizes, strides);
    int32_t v;
    check(tpu_graph_input(g_, &m, &v));
    inputs_.push_back(m);
    return v;
  }

  int view(int base, int dtype, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
           int64_t byte_delta) {
    tpu_tensor_t m = meta_of(dtype, sizes, strides);
    int32_t v;
    check(tpu_graph_view(g_, base, &m, byte_delta, &v));
    return v;
  }

  int empty(int dtype, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
    tpu_tensor_t m = meta_of(dtype, sizes, strides);
    int32_t v;
    check(tpu_graph_empty(g_, &m, &v));
    return v;
  }

  // args: one (kind, payload) tuple per schema argument, kinds as in
  // tpu_k_value_kind_t; outs: (dtype, sizes, strides) per output.
  std::vector<int> node(const std::string& op, uint32_t flags, const py::list& args, const py::list& outs,
                        const std::vector<int>& out_alias) {
    std::vector<tpu_graph_arg_t> a(args.size());
    std::vector<std::vector<int64_t>> ints(args.size());
    std::vector<std::vector<double>> doubles(args.size());
    std::vector<std::string> strings(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      auto t = args[i].cast<py::tuple>();
      tpu_graph_arg_t& x = a[i];
      x = tpu_graph_arg_t{};
      x.kind = t[0].cast<int32_t>();
      switch (x.kind) {
        case TPU_K_NONE:
          break;
        case TPU_K_TENSOR:
        case TPU_K_INT:
        case TPU_K_BOOL:
        case TPU_K_DTYPE:
          x.i = t[1].cast<int64_t>();
          break;
        case TPU_K_DOUBLE:
          x.d = t[1].cast<double>();
          break;
        case TPU_K_INTS:
        case TPU_K_TENSORS:
          ints[i] = t[1].cast<std::vector<int64_t>>();
          x.ints = ints[i].data();
          x.len = static_cast<int64_t>(ints[i].size());
          break;
        case TPU_K_DOUBLES:
          doubles[i] = t[1].cast<std::vector<double>>();
          x.doubles = doubles[i].data();
          x.len = static_cast<int64_t>(doubles[i].size());
          break;
        case TPU_K_STRING:
          strings[i] = t[1].cast<std::string>();
          x.s = strings[i].c_str();
          break;
        default:
          TORCH_CHECK_VALUE(false, "tpu graph: ", op, ": argument ", i, " has unknown kind ", x.kind);
      }
    }
    std::vector<tpu_tensor_t> metas;
    for (const auto& o : outs) {
      auto t = o.cast<py::tuple>();
      metas.push_back(meta_of(t[0].cast<int>(), t[1].cast<std::vector<int64_t>>(), t[2].cast<std::vector<int64_t>>()));
    }
    TORCH_CHECK_VALUE(out_alias.size() == metas.size(), "tpu graph: ", op, ": out_alias has ", out_alias.size(),
                      " entries for ", metas.size(), " outputs");
    std::vector<int32_t> alias(out_alias.begin(), out_alias.end());
    std::vector<int32_t> values(metas.size());
    check(tpu_graph_node(g_, op.c_str(), flags, static_cast<int32_t>(a.size()), a.data(),
                         static_cast<int32_t>(metas.size()), metas.data(), alias.data(), values.data()));
    return std::vector<int>(values.begin(), values.end());
  }

  void output(int v) {
    check(tpu_graph_mark_output(g_, v));
    outputs_.push_back(v);
  }

  void compile() {
    check(tpu_graph_compile(g_));
    for (int32_t k = 0; k < tpu_graph_num_output_buffers(g_); ++k) {
      buffer_bytes_.push_back(tpu_graph_output_buffer_bytes(g_, k));
    }
    for (int v : outputs_) {
      Located l;
      check(tpu_graph_locate(g_, v, &l.kind, &l.index, &l.byte_offset));
      check(tpu_graph_value_meta(g_, v, &l.meta));
      located_.push_back(l);
    }
  }

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) {
    TORCH_CHECK_VALUE(inputs.size() == inputs_.size(), "tpu graph: expected ", inputs_.size(), " inputs, got ",
                      inputs.size());
    std::vector<void*> in(inputs.size());
    std::vector<at::Tensor> restrided;  // alive until the run is queued
    for (size_t k = 0; k < inputs.size(); ++k) {
      const at::Tensor& t = inputs[k];
      TORCH_CHECK_VALUE(t.defined() && t.device() == c10::Device(kTpu, device_), "tpu graph: input ", k,
                        " must be a tensor on tpu:", static_cast<int>(device_), ", got ",
                        t.defined() ? t.device().str() : std::string("None"));
      tpu_tensor_t m = to_kernel_tensor(t);
      const tpu_tensor_t& want = inputs_[k];
      bool same = m.dtype == want.dtype && m.ndim == want.ndim;
      for (int32_t d = 0; same && d < m.ndim; ++d) same = m.sizes[d] == want.sizes[d];
      TORCH_CHECK_VALUE(same, "tpu graph: input ", k, " is ", describe(m), " but the graph was compiled for ",
                        describe(want));
      bool strides_match = true;
      for (int32_t d = 0; d < m.ndim; ++d) {
        strides_match = strides_match && (m.sizes[d] <= 1 || m.strides[d] == want.strides[d]);
      }
      if (!strides_match) {
        // Same values, another layout (an eager op whose output layout
        // differs from its meta function's): restride on the device.
        at::Tensor r = empty_strided_tpu(c10::IntArrayRef(want.sizes, want.ndim),
                                         c10::IntArrayRef(want.strides, want.ndim), t.scalar_type(), device_);
        native_copy(r, t);
        restrided.push_back(r);
        restrides_++;
        m = to_kernel_tensor(r);
      }
      in[k] = m.data;
    }
    c10::DeviceGuard guard(c10::Device(kTpu, device_));
    std::vector<c10::Storage> bufs;
    std::vector<void*> out;
    for (size_t bytes : buffer_bytes_) {
      bufs.emplace_back(c10::Storage::use_byte_size_t(), bytes, allocator(), /*resizable=*/true);
      out.push_back(bufs.back().mutable_data());
    }
    check(tpu_graph_run(g_, in.data(), out.data(), matmul_call_flags()));
    std::vector<at::Tensor> results;
    for (const Located& l : located_) {
      c10::ScalarType dtype = from_tpu_dtype(static_cast<tpu_dtype_t>(l.meta.dtype));
      int64_t elem = static_cast<int64_t>(tpu_dtype_size(static_cast<tpu_dtype_t>(l.meta.dtype)));
      c10::Storage storage;
      int64_t offset;
      if (l.kind == TPU_GRAPH_BUF_OUTPUT) {
        storage = bufs[l.index];
        offset = l.byte_offset / elem;
      } else {
        const at::Tensor& base = inputs[l.index];
        storage = base.storage();
        offset = (base.storage_offset() * static_cast<int64_t>(base.element_size()) + l.byte_offset) / elem;
      }
      at::Tensor t = at::empty({0}, at::TensorOptions().dtype(dtype).device(kTpu, device_));
      t.set_(storage, offset, c10::IntArrayRef(l.meta.sizes, l.meta.ndim),
             c10::IntArrayRef(l.meta.strides, l.meta.ndim));
      results.push_back(t);
    }
    return results;
  }

  void set_profiling(bool on) { tpu_graph_set_profiling(g_, on); }

  // 0 off, 1 auto, 2 required (tpu_graph_set_codegen); before compile().
  void set_codegen(int32_t mode) { tpu_graph_set_codegen(g_, mode); }

  // [(op, seconds, fused group or -1)] per node; a fused group's time is on
  // its first node. Waits for queued runs first.
  py::list profile() const {
    check(tpu_hal_device_vt(device(device_))->synchronize(device(device_)));
    py::list out;
    tpu_graph_stats_t s;
    tpu_graph_get_stats(g_, &s);
    for (int32_t i = 0; i < s.nodes; ++i) {
      const char* op;
      int64_t ns;
      int32_t group;
      check(tpu_graph_node_profile(g_, i, &op, &ns, &group));
      out.append(py::make_tuple(std::string(op), static_cast<double>(ns) * 1e-9, group,
                                tpu_graph_group_generated(g_, group)));
    }
    return out;
  }

  py::dict stats() const {
    tpu_graph_stats_t s;
    tpu_graph_get_stats(g_, &s);
    py::dict d;
    d["nodes"] = s.nodes;
    d["fused_groups"] = s.fused_groups;
    d["fused_nodes"] = s.fused_nodes;
    d["gemm_groups"] = s.gemm_groups;
    d["conv_groups"] = s.conv_groups;
    d["norm_groups"] = s.norm_groups;
    d["gemv_batches"] = s.gemv_batches;
    d["gemv_batched"] = s.gemv_batched;
    d["scratch_values"] = s.scratch_values;
    d["steps"] = s.steps;
    d["arena_bytes"] = s.arena_bytes;
    d["unplanned_bytes"] = s.unplanned_bytes;
    d["codegen_groups"] = s.codegen_groups;
    d["codegen_functions"] = s.codegen_functions;
    d["codegen_cache_hits"] = s.codegen_cache_hits;
    d["codegen_compile_seconds"] = static_cast<double>(s.codegen_compile_ns) * 1e-9;
    d["codegen_unavailable"] = s.codegen_unavailable;
    d["driver_graph"] = s.driver_graph;
    d["inputs"] = tpu_graph_num_inputs(g_);
    d["output_buffers"] = tpu_graph_num_output_buffers(g_);
    d["input_restrides"] = restrides_;
    return d;
  }

 private:
  struct Located {
    int32_t kind = 0, index = 0;
    int64_t byte_offset = 0;
    tpu_tensor_t meta{};
  };
  c10::DeviceIndex device_;
  tpu_graph_t* g_ = nullptr;
  std::vector<tpu_tensor_t> inputs_;
  std::vector<int> outputs_;
  std::vector<size_t> buffer_bytes_;
  std::vector<Located> located_;
  int64_t restrides_ = 0;  // inputs copied to the compiled layout
};

}  // namespace

void register_graph(py::module& m) {
  py::class_<Graph>(m, "Graph", "A graph for the C graph compiler (runtime/graph), built by torch_tpu._graph")
      .def(py::init<int>(), py::arg("device"))
      .def("input", &Graph::input)
      .def("view", &Graph::view)
      .def("empty", &Graph::empty)
      .def("node", &Graph::node)
      .def("output", &Graph::output)
      .def("compile", &Graph::compile)
      .def("run", &Graph::run)
      .def("stats", &Graph::stats)
      .def("set_profiling", &Graph::set_profiling)
      .def("set_codegen", &Graph::set_codegen)
      .def("profile", &Graph::profile);
}

}  // namespace torch_tpu
