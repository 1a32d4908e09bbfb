// mk synth: writes a synthetic model (random weights of a named shape) as GGUF or safetensors.
#include <fmt/format.h>  // fmt::join

#include "models/model.hpp"
#include "models/synthetic.hpp"
#include "tools/commands.hpp"

namespace mk::tools {

void register_synth(CLI::App& app) {
    struct Options {
        std::string spec, out;
    };
    auto opts = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("synth", "Write a synthetic model with seeded random weights");
    cmd->footer("SPEC: synthetic:SHAPE:DTYPE[:layers=N][:vocab=N][:seed=N][:format=gguf|safetensors]\n"
                "SHAPE: " + fmt::format("{}", fmt::join(synthetic_shapes(), ", ")) +
                "\nDTYPE: f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q6_k");
    cmd->add_option("spec", opts->spec, "The model to make, e.g. synthetic:llama-3.2-1b:bf16:layers=2")->required();
    cmd->add_option("-o,--output", opts->out, "Output .gguf file (or directory for format=safetensors)")->required();
    cmd->callback([opts] {
        SyntheticSpec spec = parse_synthetic_spec(opts->spec);
        write_synthetic_model(spec, opts->out);
        Model model = load_model(opts->out);  // prove it loads back
        fmt::print("wrote {} ({}, {} layers, {:.1f} MB of weights)\n", opts->out, to_string(spec), model.config.n_layers,
                   model.total_weight_bytes / 1e6);
    });
}

}  // namespace mk::tools
