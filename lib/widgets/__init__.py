"""Two interactive views of a model for the book: the temperature widget (chapter 6) and the
attention viewer (chapter 3).

    temperature_widget(model, tokenizer, prompt)   # next-token distribution and a sample
    attention_viewer(model, tokenizer, prompt)     # attention matrix of any layer and head

`model` is either twin's GPT, `tokenizer` a lib.tokenizer.BPETokenizer (`BPETokenizer()` is the
byte tokenizer of the small Shakespeare model, `gpt2_tokenizer()` GPT-2's). Each call returns an
object that a notebook displays in two parts:

1. A static widget that works wherever HTML does (the built book, Jupyter, Colab), with no
   kernel: every state the controls can select is computed and drawn when the cell runs, and a
   few lines of inline JavaScript show the one the controls select (static.py).
2. With a kernel, live ipywidgets controls that run the model again for any prompt and any
   setting, drawn by the same Python functions (live.py).

Bad input typed into a live widget (an empty prompt; a prompt longer than the context, which is
cropped to its last n_ctx tokens as generation does) is reported as a message in the widget.

The modules, one job each:
    static.py       the static widget's HTML; its style and script are static.css and static.js
    live.py         displaying a widget, and the box of live controls
    prompt.py       a prompt encoded and cropped, its tokens as labels
    sampler.py      every setting of the temperature widget sampled in one batched generation
    temperature.py  the temperature widget
    attention.py    the attention viewer
"""
from .attention import AttentionViewer, attention_viewer
from .prompt import PromptError
from .temperature import TemperatureWidget, temperature_widget

__all__ = ["AttentionViewer", "PromptError", "TemperatureWidget", "attention_viewer", "temperature_widget"]
