"""Kernel side of ``cross-attention-seq2seq``: the student's decoder step."""

from grader.kernel.adapters import inject_weights, unpack
from grader.kernel.runners._common import (
    Run,
    call_student,
    lookup,
    numpy_results,
    tensors,
    with_gradients,
)

TARGETS = {"tf": "BahdanauDecoderStepTF", "torch": "BahdanauDecoderStepTorch"}
WEIGHTS = ("W_q", "W_k", "w_v", "W_e", "W_c", "W_s", "b")
# embed_dim == hidden_dim, so a query taken from the embedding has the query's
# shape and is graded (and named), not stopped by a shape error
EMBED_DIM, HIDDEN_DIM, ENC_DIM, ATTN_DIM = 4, 4, 6, 5
OUTPUTS = ("state", "context", "weights")
INPUTS = ("embedded", "prev_state", "enc_outputs")


def run(framework: str, namespace: dict, inputs: dict, gradients: bool = True) -> dict:
    name = TARGETS[framework]
    cls = lookup(namespace, name)
    t = tensors(
        framework,
        inputs,
        (*INPUTS, "src_mask"),
        variables=("prev_state", "enc_outputs") if gradients else (),
    )
    args = tuple(t[n] for n in INPUTS)
    mask = t["src_mask"] if bool(inputs["has_mask"]) else None
    sizes = (EMBED_DIM, HIDDEN_DIM, ENC_DIM, ATTN_DIM)
    layer = call_student(
        f"{name}(embed_dim={EMBED_DIM}, hidden_dim={HIDDEN_DIM}, "
        f"enc_dim={ENC_DIM}, attn_dim={ATTN_DIM})",
        cls,
        *sizes,
    )
    if framework == "tf":
        call_student(
            f"{name}(...)(embedded, prev_state, enc_outputs) (first call)",
            layer,
            *args,
        )
    variables = inject_weights(framework, layer, {w: inputs[w] for w in WEIGHTS}, name)
    what = f"{name}(...)(embedded, prev_state, enc_outputs, src_mask=...)"
    out = call_student(what, layer, *args, src_mask=mask)
    results = numpy_results(unpack(out, OUTPUTS, what), name)
    if not gradients:
        return results

    def forward():
        what = f"{name}(...)(embedded, prev_state, enc_outputs)"
        return unpack(call_student(what, layer, *args), OUTPUTS, what)

    g = tensors(framework, inputs, ("upstream_state", "upstream_context"))
    upstream = {"state": g["upstream_state"], "context": g["upstream_context"]}
    sources = {
        **variables,
        "prev_state": t["prev_state"],
        "enc_outputs": t["enc_outputs"],
    }
    grads = with_gradients(framework, forward, sources, upstream, name)
    results.update({k: v for k, v in grads.items() if k.startswith("grad_")})
    return results


RUNS = {
    "forward": Run(run, cases=("plain", "long_source")),
    "masks": Run(run, cases=("padded",)),
    "gradients": Run(run, cases=("plain",), gradients=True),
}
