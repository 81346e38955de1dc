import copy, json, pathlib, shutil, base64, os, time
W = pathlib.Path("/work/wt/instructor")
STU = W / "_build/student/notebooks"
INS = W / "notebooks"
C = pathlib.Path("/tmp/instr/class")
if C.exists(): shutil.rmtree(C)
C.mkdir(parents=True)
N1, N4 = "01_attention_recap", "04_multi_head_attention"

def load(p): return json.load(open(p))
def save(nb, rel):
    p = C / rel; p.parent.mkdir(parents=True, exist_ok=True)
    json.dump(nb, open(p, "w"), indent=1)
def src(c): return "".join(c["source"])
def code(s, outputs=None):
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": outputs or [], "source": s}
def md(s): return {"cell_type": "markdown", "metadata": {}, "source": s}
def set_sol(nb, name, body):
    for c in nb["cells"]:
        if c["cell_type"] == "code" and src(c).startswith(f"def {name}("):
            c["source"] = body; return c
    raise KeyError(name)
def set_answer(nb, ex, text):
    for c in nb["cells"]:
        if src(c).startswith(f"**Your answer to Exercise {ex}.**"):
            c["source"] = text; return
    raise KeyError(ex)
def idx(nb, start):
    for i, c in enumerate(nb["cells"]):
        if src(c).startswith(start): return i
    raise KeyError(start)

SOL1 = {
 "stable_softmax": "def stable_softmax(scores, temperature):\n    s = scores / temperature\n    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)\n    return e / e.sum(dim=-1, keepdim=True)\n",
 "causal_padding_mask": "def causal_padding_mask(lengths, n):\n    pos = torch.arange(n)\n    causal = pos[None, :] <= pos[:, None]\n    real = pos[None, None, :] < lengths[:, None, None]\n    return causal & real\n",
 "nearest_key_features": "def nearest_key_features(q, k):\n    return torch.cat([q, torch.ones_like(q)], dim=-1), torch.cat([k, -k**2 / 2], dim=-1)\n",
 "entropy_curve": "def entropy_curve(scores, temperatures):\n    out = []\n    for t in temperatures:\n        lw = torch.log_softmax(scores / t, dim=-1)\n        out.append(-(lw.exp() * lw).sum(dim=-1).mean())\n    return torch.stack(out)\n",
}
SOL4 = {
 "pack_heads": "def pack_heads(w_qs, w_ks, w_vs, w_o):\n    d, dh = w_qs[0].shape\n    m = mha.MultiHeadAttention(d, len(w_qs), head_dim=dh, bias=False)\n    with torch.no_grad():\n        m.q_proj.weight.copy_(torch.cat(w_qs, dim=1).T)\n        m.k_proj.weight.copy_(torch.cat(w_ks, dim=1).T)\n        m.v_proj.weight.copy_(torch.cat(w_vs, dim=1).T)\n        m.out_proj.weight.copy_(w_o.T)\n    return m\n",
 "course_mask": "def course_mask(key_padding_mask, attn_mask):\n    allowed = torch.ones(1, 1, 1, 1, dtype=torch.bool)\n    if key_padding_mask is not None:\n        allowed = allowed & ~key_padding_mask[:, None, None, :]\n    if attn_mask is not None:\n        allowed = allowed & ~attn_mask\n    return allowed\n",
}
def filled(nbname, sols):
    nb = load(STU / f"{nbname}.ipynb")
    for k, v in sols.items(): set_sol(nb, k, v)
    return nb

PNG = base64.b64encode(bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cf00000301010018dd8db00000000049454e44ae426082")).decode()

# alice: correct = instructor notebooks
shutil.copy(INS / f"{N1}.ipynb", C / "asmith" / f"{N1}.ipynb") if (C/"asmith").mkdir() is None else None
shutil.copy(INS / f"{N4}.ipynb", C / "asmith" / f"{N4}.ipynb")

# bob: partial
nb = filled(N1, SOL1)
set_sol(nb, "stable_softmax", "def stable_softmax(scores, temperature):\n    e = torch.exp(scores / temperature)\n    return e / e.sum(dim=-1, keepdim=True)\n")
set_sol(nb, "nearest_key_features", "def nearest_key_features(q, k):\n    return q, k\n")
set_answer(nb, "1.1", "Var(q.k) = d_k sigma^4, so $c = 1/(\\sigma^2\\sqrt{d_k})$. <script>alert('x')</script> <img src=x onerror=alert(1)>")
set_answer(nb, "1.4", "The query term cancels in the softmax (bob).")
save(nb, f"bobjones/{N1}.ipynb")
nb = filled(N4, SOL4)
set_sol(nb, "course_mask", SOL4["course_mask"].replace("    return allowed\n",
  "    allowed = allowed.clone() if allowed.dim() == 4 else allowed\n    # avoid NaN: a row with no key may attend to key 0\n    allowed = allowed.expand(allowed.shape[0], 1, allowed.shape[2], allowed.shape[3]).clone()\n    empty = ~allowed.any(dim=-1)\n    allowed[..., 0] |= empty\n    return allowed\n"))
set_answer(nb, "4.3", "N = h d_k (d + kdim + 2) + h d_v (vdim + d + 1) + d (bob)")
i = idx(nb, "# YOUR CODE HERE")
nb["cells"][i] = code("print('2 heads: 0.31, 3 heads: 0.02')\n", [
    {"output_type": "stream", "name": "stdout", "text": "2 heads: 0.31, 3 heads: 0.02\n"},
    {"output_type": "display_data", "metadata": {}, "data": {"image/png": PNG, "text/plain": "<Figure>"}}])
set_answer(nb, "4.5", "Two heads cannot do three look-ups; bob's prediction was 1/3.")
save(nb, f"bobjones/{N4}.ipynb")

# carol: blank
shutil.copy(STU / f"{N1}.ipynb", (C / "cwhite").mkdir() or C / "cwhite" / f"{N1}.ipynb")
shutil.copy(STU / f"{N4}.ipynb", C / "cwhite" / f"{N4}.ipynb")

# dave: fails in first cell
nb = filled(N1, SOL1)
i = idx(nb, "import math")
nb["cells"][i]["source"] = "name = input('Your name: ')\n" + src(nb["cells"][i])
set_answer(nb, "1.1", "c = 1/(sigma^2 sqrt(d_k)) (dave)")
save(nb, f"dlee/{N1}.ipynb")
nb = filled(N4, SOL4)
i = idx(nb, "import matplotlib")
nb["cells"][i]["source"] = "import missing_pkg\n" + src(nb["cells"][i])
save(nb, f"dlee/{N4}.ipynb")

# eve: answer in new cell below stub (ch1); helper below solution (ch4)
nb = load(STU / f"{N1}.ipynb")
for name, body in SOL1.items():
    i = idx(nb, f"def {name}(")
    nb["cells"].insert(i + 1, code("# my answer, written below the stub\n" + body))
save(nb, f"ebrown/{N1}.ipynb")
nb = filled(N4, SOL4)
set_sol(nb, "course_mask", "def course_mask(key_padding_mask, attn_mask):\n    return _combine(_flip(key_padding_mask, True), _flip(attn_mask, False))\n")
i = idx(nb, "def course_mask(")
nb["cells"].insert(i + 1, code("def _flip(m, padding):\n    if m is None:\n        return torch.ones(1, 1, 1, 1, dtype=torch.bool)\n    return ~m[:, None, None, :] if padding else ~m\n\n\ndef _combine(a, b):\n    return a & b\n"))
save(nb, f"ebrown/{N4}.ipynb")

# frank: renamed file
nb = filled(N1, SOL1)
save(nb, "fgarcia/homework1 (final).ipynb")
save(filled(N4, SOL4), f"fgarcia/{N4}.ipynb")

# grace: ch4 twice (named copy partial: 4.2 wrong; v2 correct, newer)
save(filled(N1, SOL1), f"gkim/{N1}.ipynb")
nb = filled(N4, SOL4)
set_sol(nb, "course_mask", "def course_mask(key_padding_mask, attn_mask):\n    return torch.ones(1, 1, 1, 1, dtype=torch.bool)\n")
save(nb, f"gkim/{N4}.ipynb")
time.sleep(1.1)
save(filled(N4, SOL4), f"gkim/{N4}_v2.ipynb")

# roster: Canvas gradebook export style; hnguyen handed in nothing
(C.parent / "roster.csv").write_text(
'Student,ID,SIS User ID,SIS Login ID,Section,01_attention_recap (5501),Chapter 4 (5504),Current Score,Final Score\n'
'    Points Possible,,,,,10.00,10.00,(read only),(read only)\n'
'"Smith, Alice",1001,S001,asmith,Section A,,,,\n'
'"Jones, Bob",1002,S002,bjones,Section A,,,,\n'
'"White, Carol",1003,S003,cwhite,Section A,,,,\n'
'"Lee, Dave",1004,S004,dlee,Section B,,,,\n'
'"Brown, Eve",1005,S005,ebrown,Section B,,,,\n'
'"Garcia, Frank",1006,S006,fgarcia,Section B,,,,\n'
'"Kim, Grace",1007,S007,gkim,Section A,,,,\n'
'"Nguyen, Henry",1008,S008,hnguyen,Section B,,,,\n'
'"Student, Test",9999,,,,,,,\n')
print(sorted(str(p.relative_to(C)) for p in C.rglob("*.ipynb")))
