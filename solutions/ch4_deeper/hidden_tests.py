"""Hidden tests of exercise 4.2 (deeper): the parameter count of a GPT from its config.

Reference: the sum, over every tensor the twins create (lib.config.param_shapes), of its size;
the head is tied to the token embedding, so it adds nothing. Exact integers, no tolerance.
Configs: the real GPT-2 sizes, the course's small preset, the exercise's 24 layers / 16 heads,
shapes where one term dominates (huge vocabulary, long context, one layer, width 8), and
head counts that must not change the count (an edge test: a constant answer gets it right
whenever it gets GPT-2 Small right). Names describe the config, never the count.
"""
import math

from lib.config import GPTConfig, param_shapes
from grader.spec import Config, Exercise, Test, integer

EXERCISE = Exercise(
    notebook="ch4_deeper", title="Deeper",
    functions=("count_params",),
    # lib's counting functions, and the constructors of the layers that hold parameters: building
    # lib's Embedding, Block and LayerNorm (on zero-stride arrays, at no memory cost) and summing
    # named_parameters() would count for the student.
    blocked=("lib.config:param_counts", "lib.config:param_shapes", "lib.numpy_twin.model:GPT.num_params",
             "lib.torch_twin.model:GPT.num_params", "lib.numpy_twin.model:Linear.__init__",
             "lib.numpy_twin.model:Embedding.__init__", "lib.numpy_twin.model:LayerNorm.__init__"),
)


def count_params(config):
    return sum(math.prod(shape) for shape in param_shapes(config).values())


REFERENCE = {"count_params": count_params}

CONFIGS = {
    "GPT-2 Small (12 layers, 12 heads, 768 wide)": GPTConfig.gpt2(),
    "GPT-2 Medium (24 layers, 16 heads, 1024 wide)": GPTConfig.gpt2_medium(),
    "GPT-2 Large (36 layers, 20 heads, 1280 wide)": GPTConfig.gpt2(n_layer=36, n_head=20, n_embd=1280),
    "GPT-2 XL (48 layers, 25 heads, 1600 wide)": GPTConfig.gpt2(n_layer=48, n_head=25, n_embd=1600),
    "small preset": GPTConfig.small(),
    "small, 24 layers and 16 heads": GPTConfig.small(n_layer=24, n_head=16),
    "small, twice as wide": GPTConfig.small(n_embd=256),
    "GPT-2 Small with 1 head (heads do not change the count)": GPTConfig.gpt2(n_head=1),
    "one layer, width 8, vocabulary 1, context 1": GPTConfig(vocab_size=1, n_ctx=1, n_layer=1, n_head=2, n_embd=8),
    "vocabulary 100,000, context 8": GPTConfig(vocab_size=100_000, n_ctx=8, n_layer=2, n_head=4, n_embd=64),
    "context 8192, vocabulary 2": GPTConfig(vocab_size=2, n_ctx=8192, n_layer=3, n_head=3, n_embd=96),
    "relu activation (no parameters of its own)": GPTConfig.small(activation="relu"),
}


def tests():
    return [Test(name, "count_params", (Config(cfg.to_dict()),), integer(count_params(cfg)), edge="1 head" in name)
            for name, cfg in CONFIGS.items()]
