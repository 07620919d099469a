"""The Chinese labels of the diagrams (book/figures/zh/<name>.svg).

``LABELS`` maps every string that a figure draws through ``Canvas.text`` and that has
Latin letters outside ``$…$`` maths to the string the Chinese figure draws instead;
``draw.py --language zh`` fails on a string missing here. A string that stays as it
is (code, API names, the running example's English words, abbreviations such as GQA,
single symbols) maps to itself, so the table is the full list. Strings used by
several figures appear once, under the first figure that draws them.

Conventions: the terms of the glossary (book/glossary.md, book/zh/glossary.md) and
of the Chinese chapters around each figure; ``$…$`` maths, numbers, code and the
example words (欢迎 来 北京) unchanged; full-width punctuation in Chinese text, ASCII
inside code and formulas; a space between Chinese and a Latin word, a number or maths.
"""

LABELS: dict[str, str] = {
    # addressing-qkv (book/addressing.md)
    "Soft addressing: attention reads every slot, weighted": (
        "软寻址：注意力按权重读取每一个槽位"
    ),
    r"keys $\mathbf{k}_i$": r"键 $\mathbf{k}_i$",
    r"scores $s_i$": r"分数 $s_i$",
    r"weights $\alpha_i$": r"权重 $\alpha_i$",
    r"values $\mathbf{v}_i$": r"值 $\mathbf{v}_i$",
    "memory: 4 (key, value) slots": "存储器：4 个（键，值）槽位",
    "a noisy 北京": "带噪声的“北京”",
    "welcome": "welcome",
    "to": "to",
    "Beijing": "Beijing",
    "Shanghai": "Shanghai",
    "≈ Beijing": "≈ Beijing",
    "1  score each key": "1  给每个键打分",
    "2  softmax": "2  softmax",
    "3  weighted sum": "3  加权求和",
    "Hard addressing: a Python dict reads one slot": (
        "硬寻址：Python 字典只读取一个槽位"
    ),
    "key == query ?": "key == query ?",
    "no  no  yes  no": "否  否  是  否",
    "one-hot weights": "独热权重",
    "A query equal to no key finds nothing (KeyError), and no gradient says which "
    "key was close,": (
        "查询若不等于任何一个键，就什么也找不到（KeyError），也没有梯度指出哪个键比较接近，"
    ),
    "so hard addressing cannot be learned by gradient descent; soft addressing "
    "can.": "所以硬寻址无法用梯度下降来学习，软寻址则可以。",
    # scoring-three-steps (book/scoring-functions.md)
    "score every key": "给每个键打分",
    "dot": "点积",
    "scaled dot": "缩放点积",
    "general (bilinear)": "双线性（general）",
    "additive (concat)": "加性（concat）",
    'additive: Bahdanau et al. 2015; Luong et al.\'s "concat"': (
        "加性：Bahdanau 等，2015；即 Luong 等所说的“concat”"
    ),
    "softmax": "softmax",  # also self-attention
    "weighted sum": "加权求和",
    "a blend of all the": "所有值的混合，",
    "values; the largest": "权重最大的那些值",
    "weights dominate": "起主导作用",
    # soft-vs-hard (book/soft-hard-attention.md)
    "Soft attention": "软注意力",
    "the expectation over all values": "对所有值求期望",
    "✓ gradient": "✓ 梯度",
    "reaches every": "传到每个",
    r"weight $\alpha_i$": r"权重 $\alpha_i$",
    "differentiable: trained by backpropagation": "可微：用反向传播训练",
    "Hard attention": "硬注意力",
    "one index drawn from the same weights": "按同样的权重抽取一个下标",
    r"draw $I \sim \mathrm{Categorical}(\alpha)$:  here $I = 2$": (
        r"抽取 $I \sim \mathrm{Categorical}(\alpha)$：这里 $I = 2$"
    ),
    "one-hot": "独热",
    "no gradient": "梯度无法",
    "through the draw": "穿过这次抽样",
    "ways around: REINFORCE": "绕开的办法：REINFORCE",
    "or a relaxed sample (Gumbel-softmax)": "或者用松弛后的样本（Gumbel-softmax）",
    # masks-padding-causal (book/key-value-masking.md)
    "Masks: which keys each query may attend": "掩码：每个查询可以关注哪些键",
    "may attend (True)": "可以关注（True）",
    "blocked (False)": "被屏蔽（False）",
    "Padding": "填充掩码",
    "sequence 1: length 5": "序列 1：长度 5",
    "padding": "填充",
    "sequence 2: length 3": "序列 2：长度 3",
    "key j is blocked for every query when j ≥ length:": (
        "当 j ≥ 长度时，键 j 对每个查询都被屏蔽："
    ),
    "one row per sequence, broadcast over the queries": (
        "每个序列一行，沿查询方向广播"
    ),
    "queries": "查询",  # also flash-attention-tiles
    "keys": "键",  # also seq2seq-two-styles, flash-attention-tiles
    "Causal, top-left": "因果掩码（左上角对齐）",
    r"$n_q = n_k = 5$: query $i$ may": r"$n_q = n_k = 5$：查询 $i$ 可以",
    r"attend key $j \leq i$; the diagonal": r"关注键 $j \leq i$；对角线",
    "starts at the top-left corner": "从左上角开始",
    "Causal, bottom-right": "因果掩码（右下角对齐）",
    "cached": "已缓存",  # also kv-cache-gqa
    "new": "新",  # also kv-cache-gqa
    "3 new queries (at positions 3-5) over": "3 个新查询（位置 3-5）、6 个键，",
    "6 keys, as a decoder with a KV": "正如带键值缓存的解码器所需：",
    "cache needs: query i may attend": "查询 i 可以关注",
    r"key $j \leq i + (n_k - n_q)$; the": r"键 $j \leq i + (n_k - n_q)$；",
    "diagonal ends at the bottom-right": "对角线终止于右下角",
    "Rows are queries, columns keys. With as many queries as keys the two causal "
    "alignments agree. With fewer queries": (
        "行是查询，列是键。查询与键一样多时，两种因果对齐方式的结果相同；查询比键少时，"
    ),
    "than keys, top-left alignment would hide from the newest queries the cached "
    "keys that came before them.": (
        "左上角对齐会让最新的查询看不到位于它们之前的已缓存键。"
    ),
    # self-attention (book/self-attention.md)
    "Self-attention: queries, keys and values from one sequence": (
        "自注意力：查询、键和值来自同一个序列"
    ),
    "each row": "按行",
    "n × n weights,": "n × n 的权重，",
    "each row sums to 1": "每行之和为 1",  # also cross-attention
    "one output": "每个词元",
    "per token": "一个输出",
    "Output row i mixes the value rows of all tokens with the weights in row i of "
    "A. Shades show magnitudes;": (
        "输出的第 i 行用 A 第 i 行的权重把所有词元的值行混合起来。"
        "颜色深浅表示数值大小；"
    ),
    "the numbers come from random weights, as in an untrained layer.": (
        "这些数由随机权重算出，和未经训练的层一样。"
    ),
    # seq2seq-two-styles (book/cross-attention-seq2seq.md)
    "Style 1: scaled_dot": "风格 1：scaled_dot",
    r"query = previous decoder state $\mathbf{s}_{t-1}$": (
        r"查询 = 解码器的上一个状态 $\mathbf{s}_{t-1}$"
    ),
    "encoder": "编码器",
    "softmax over j": "对 j 做 softmax",
    "values": "值",
    "GRU": "GRU",
    "embedding of the previous word": "上一个词的嵌入",
    "scores read": "打分时读取",
    "every state": "每个状态",
    "Style 2: location": "风格 2：location",
    "weights from a dense layer over positions": "权重由线性层按位置直接给出",
    "L scores, one per position": "L 个分数，每个位置一个",
    "masked": "被遮住",
    "scores never": "打分时从不",
    r"read $\mathbf{h}_j$": r"读取 $\mathbf{h}_j$",
    # cross-attention (book/cross-attention-seq2seq.md)
    "Cross-attention: the decoder's states query the encoder's states": (
        "交叉注意力：解码器的状态查询编码器的状态"
    ),
    "queries:": "查询：",
    "decoder states": "解码器状态",
    "(one per output word)": "（每个输出词一个）",
    "keys and values:": "键和值：",
    "encoder states": "编码器状态",
    'Writing "Beijing": its query scores all three source states and reads mostly '
    "北京.": "写出“Beijing”时，这一步的查询给三个源状态都打了分，主要读取的是“北京”。",
    "weights: row = output word,": "权重：每行对应一个输出词，",
    "(illustrative numbers)": "（示意数值）",
    # multihead-split-merge (book/multi-head-attention.md)
    "Splitting and merging heads (T = 3, d_model = 8, h = 4, d_head = 2)": (
        "头的拆分与合并（T = 3，d_model = 8，h = 4，d_head = 2）"
    ),
    "input X": "输入 X",
    "(B, T, d_model)": "(B, T, d_model)",
    "linear": "投影",
    "Q = X W_q": "Q = X W_q",
    "(K and V alike)": "（K 和 V 同理）",
    "reshape": "变形",
    "(B, T, h, d_head)": "(B, T, h, d_head)",
    "heads cut apart": "切开各个头",
    "transpose": "转置",
    "(B, h, T, d_head)": "(B, h, T, d_head)",
    "head": "头",
    "h slabs, like a batch": "h 片，就像一个批量",
    "attention per head": "逐头计算注意力",
    "one output per head": "每个头一个输出",
    "back to (B, T, h, d_head)": "变回 (B, T, h, d_head)",
    "transpose back": "转置回来",
    "heads side by side": "各头并排",
    "concatenate": "拼接",
    "output": "输出",
    "Each colour is one head's d_head features. Split and merge only reshape and "
    "transpose; W_o mixes the heads.": (
        "每种颜色是一个头的 d_head 个特征。"
        "拆分与合并只做变形和转置；W_o 把各个头混合起来。"
    ),
    # builtin-mask-polarity (book/builtin-layers.md)
    "The same mask in each API: keys 0-2 are words, key 3 is padding": (
        "同一个掩码在各个 API 中的含义：键 0-2 是词，键 3 是填充"
    ),
    "API": "API",
    "boolean argument": "布尔参数",
    "True means": "True 表示",
    "key": "键",
    "Keras Attention,": "Keras Attention,",
    "AdditiveAttention": "AdditiveAttention",
    "mask=[q_mask, v_mask]": "mask=[q_mask, v_mask]",
    "attend": "关注",
    "T": "T",
    "F": "F",
    "Keras": "Keras",
    "MultiHeadAttention": "MultiHeadAttention",
    "attention_mask": "attention_mask",
    "keras.ops.": "keras.ops.",
    "dot_product_attention": "dot_product_attention",
    "mask": "mask",
    "torch F.": "torch F.",
    "scaled_dot_product_attention": "scaled_dot_product_attention",
    "attn_mask (bool)": "attn_mask (bool)",
    "torch nn.": "torch nn.",
    "MultiheadAttention": "MultiheadAttention",
    "attn_mask,\nkey_padding_mask (bool)": "attn_mask,\nkey_padding_mask (bool)",
    "BLOCKED": "屏蔽",
    "attncourse": "attncourse",
    "(this course)": "（本课程）",
    "attended": "被关注",
    "blocked": "被屏蔽",  # also kv-cache-gqa
    "Float masks (torch) are added to the scores: 0 keeps a key, -inf blocks "
    "it.": "浮点掩码（torch）直接加到分数上：0 保留该键，-inf 屏蔽该键。",
    "Letters: the boolean you pass; colours: what the API does with it. Handing a "
    "True = attend mask to nn.MultiheadAttention": (
        "字母是你传入的布尔值，颜色是 API 对它的处理。"
        "把“True = 可以关注”的掩码交给 nn.MultiheadAttention，"
    ),
    "blocks exactly the keys you meant to keep.": "屏蔽的恰恰是你想保留的那些键。",
    # attention-cost-tiles (book/attention-cost.md)
    "The n × n table, and the tiled way around it": "n × n 的表，以及分块绕开它的办法",
    "n = 4": "n = 4",
    "16 scores": "16 个分数",
    "n = 8": "n = 8",
    "64 scores": "64 个分数",
    "n = 16": "n = 16",
    "256 scores": "256 个分数",
    "Every query scores every key: twice the": "每个查询都要给每个键打分：长度",
    "length, four times the scores. Time and": "翻一倍，分数的个数就变为四倍。时间和",
    "memory grow as O(n²).": "内存都按 O(n²) 增长。",
    "query block": "查询块",
    "key / value blocks stream in  →": "键块 / 值块依次流入  →",
    "light: done, folded into m, ℓ, u": "浅色：已完成，并入了 m、ℓ、u",
    "dark: the one tile alive now": "深色：此刻唯一在内存中的块",
    "per query, after each block:": "每个块之后，对每个查询：",
    r"end: $\mathbf{o} = \mathbf{u} / \ell$": r"最后：$\mathbf{o} = \mathbf{u} / \ell$",
    "exact, not an approximation;": "结果是精确的，不是近似；",
    "memory O(n · block)": "内存 O(n · 块大小)",
    "m: running max, ℓ: sum of exponentials, u: unnormalised output": (
        "m：当前最大值，ℓ：指数之和，u：未归一化的输出"
    ),
    # flash-attention-tiles (book/flash-attention.md)
    "Forward: tiles over queries and keys, causal": (
        "前向传播：在查询和键上分块，因果掩码"
    ),
    "skip": "跳过",
    "n = 12, blocks of 3: 4 × 4 tiles": "n = 12，块大小为 3：4 × 4 个块",
    "causal: 10 tiles computed, 6 skipped": "因果：计算 10 个块，跳过 6 个",
    r"for each query block $i$:": r"对每个查询块 $i$：",
    r"for each key block $j \leq i$  (causal):": r"对每个键块 $j \leq i$（因果）：",
    "alive at once: one tile of scores": "同时在内存中的只有：一块分数，",
    "and the running m, ℓ, U of one block": "以及一个查询块当前的 m、ℓ、U",
    "diagonal tile: mask the cells with j > i": "对角块：遮住 j > i 的格子",
    "score computed": "已计算的分数",
    "masked inside a diagonal tile": "对角块内被遮住",
    "tile skipped (never computed)": "跳过的块（根本不计算）",
    # flash-attention-backward (book/flash-attention.md)
    "Backward: rebuild each tile's weights from L, never store them": (
        "反向传播：由 L 重建每个块的权重，从不保存它们"
    ),
    "query block i: key blocks": "查询块 i：键块 j ≤ i",
    "j ≤ i stream past, as forward": "依次流过，与前向传播相同",
    "inputs and saved": "输入和保存的量",
    "rebuilt for tile (i, j)": "为块 (i, j) 重建",
    "accumulated": "累加",
    r"$L_i$  (logsumexp)": r"$L_i$（对数求和指数）",
    "saved by the forward: O and L, one number per query (b, nq)": (
        "前向传播保存的：O 和 L（L 每个查询一个数，形状 (b, nq)）"
    ),
    "never saved: the (nq, nk) weights P; each tile is rebuilt, used, dropped": (
        "从不保存的：(nq, nk) 的权重 P；每个块都现场重建、用完即丢弃"
    ),
    "skipped tiles (j > i) are skipped here too": "跳过的块（j > i）在这里同样跳过",
    # attention-kernel-grid (book/attention-kernel.md)
    "One program per block of queries; the tile loop inside it": (
        "每个查询块一个程序；分块循环在程序内部"
    ),
    "grid = (query blocks, batch × heads)": "网格 = (查询块, 批量 × 头)",
    "program_id(0): query block i": "program_id(0)：查询块 i",
    "program_id(1): batch · head row": "program_id(1)：批量 · 头 的行",
    "all run in parallel, independent": "全部并行运行，互不依赖",
    "GPU memory (HBM): large, slow": "显存（HBM）：大而慢",
    "on chip (SRAM, registers): small, fast": "片上（SRAM、寄存器）：小而快",
    "$Q$  (bh, $n_q$, d)": "$Q$  (bh, $n_q$, d)",
    "$K$  (bh, $n_k$, d)": "$K$  (bh, $n_k$, d)",
    "$V$  (bh, $n_k$, $d_v$)": "$V$  (bh, $n_k$, $d_v$)",
    "$O$, $L$  outputs": "$O$、$L$  输出",
    "$Q_i$  (BLOCK_Q, d): loaded once": "$Q_i$  (BLOCK_Q, d)：只读入一次",
    "$K_j$, $V_j$: one key block per step": "$K_j$、$V_j$：每步一个键块",
    "$S$, $P$  (BLOCK_Q, BLOCK_K)": "$S$, $P$  (BLOCK_Q, BLOCK_K)",
    r"$m$, $\ell$, $U$: float32 accumulators": r"$m$、$\ell$、$U$：float32 累加器",
    "tl.load": "tl.load",
    "tl.store, once": "tl.store，只写一次",
    "for j in range(0, stop, BLOCK_K):": "for j in range(0, stop, BLOCK_K):",
    "tl.dot → tl.exp → tl.dot": "tl.dot → tl.exp → tl.dot",
    "the n × n scores never leave the chip": "n × n 的分数从不离开芯片",
    "program (2, 1), drawn on the right": "程序 (2, 1)，右侧画出其内部",
    "causal: stop ends at the block's diagonal": "因果：stop 止于该块的对角线",
    # kv-cache-gqa (book/kv-cache.md)
    "Decoding with a KV cache": "用键值缓存解码",
    "one new query per step attends to every cached key": (
        "每一步一个新查询，关注所有已缓存的键"
    ),
    "step 1: $q_0$": "第 1 步：$q_0$",
    "t = 1": "t = 1",
    "step 2: $q_1$": "第 2 步：$q_1$",
    "t = 2": "t = 2",
    "step 3: $q_2$": "第 3 步：$q_2$",
    "t = 3": "t = 3",
    "step 4: $q_3$": "第 4 步：$q_3$",
    "t = 4": "t = 4",
    "step 5: $q_4$": "第 5 步：$q_4$",
    "t = 5": "t = 5",
    "keys (and values) in the cache": "缓存中的键（和值）",
    "A chunk of 3 new tokens (positions 3-5)": "由 3 个新词元组成的一段（位置 3-5）",
    "bottom-right: correct": "右下角对齐：正确",
    "top-left: wrong": "左上角对齐：错误",
    "may attend": "可以关注",
    "red outline: keys the top-left mask wrongly hides": (
        "红色轮廓：左上角对齐的掩码错误遮住的键"
    ),
    "Query heads share key/value heads": "查询头共享键/值头",
    r"cache per token and layer: $2 \cdot G \cdot d_{\mathrm{head}}$ numbers": (
        r"每个词元每层的缓存：$2 \cdot G \cdot d_{\mathrm{head}}$ 个数"
    ),
    "MHA: G = 8": "MHA: G = 8",
    "GQA: G = 2": "GQA: G = 2",
    "MQA: G = 1": "MQA: G = 1",
    "query head h reads kv head h // (H / G); H = 8 here": (
        "查询头 h 读取键/值头 h // (H / G)；这里 H = 8"
    ),
    # rope-rotation (book/positions.md)
    "RoPE: turn feature pairs by position": "RoPE：按位置旋转特征对",
    "ALiBi: a fixed bias per head": "ALiBi：每个头一个固定的偏置",
    "features of q": "q 的特征",
    "halves: feature i pairs with i + d/2 (d = 8)": (
        "前后两半配对：特征 i 与 i + d/2 一对（d = 8）"
    ),
    "m=0": "m=0",
    "m=1": "m=1",
    "m=2": "m=2",
    "m=3": "m=3",
    r"pair (0, 4): $\theta_0 = 1$": r"特征对 (0, 4)：$\theta_0 = 1$",
    "m=8": "m=8",
    "m=16": "m=16",
    "m=24": "m=24",
    r"pair (1, 5): $\theta_1 = 0.1$": r"特征对 (1, 5)：$\theta_1 = 0.1$",
    r"at position m each pair turns by $m\,\theta_i$, $\theta_i = 10000^{-2i/d}$;": (
        r"在位置 m，每一对转过 $m\,\theta_i$，$\theta_i = 10000^{-2i/d}$；"
    ),
    r"$q_m \cdot k_n$ then sees the angle $(n - m)\,\theta_i$ only": (
        r"于是 $q_m \cdot k_n$ 只看到角度 $(n - m)\,\theta_i$"
    ),
    "head 1: slope 1/4": "头 1：斜率 1/4",
    "head 2: slope 1/16": "头 2：斜率 1/16",
    "head 3: slope 1/64": "头 3：斜率 1/64",
    "head 4: slope 1/256": "头 4：斜率 1/256",
    "score + bias, bias = -slope (i - j): older keys cost": (
        "分数 + 偏置，偏置 = -斜率 × (i - j)：键越早，"
    ),
    "more, steeply in head 1, hardly in head 4 (rows: queries)": (
        "惩罚越大：头 1 中增长很陡，头 4 中几乎不变（行：查询）"
    ),
    # sliding-window-band (book/sparse-linear-attention.md)
    "Sliding-window attention: a band in the grid, stored as a band": (
        "滑动窗口注意力：网格中的一条带，按带存储"
    ),
    "key j": "键 j",
    "query i": "查询 i",
    "n² = 64 cells,": "n² = 64 个格子，",
    "21 of them used": "只用到其中 21 个",
    "keep only": "只保留",
    "the band": "这条带",
    "slot c": "槽位 c",
    "n · w = 24 cells": "n · w = 24 个格子",
    "cell: key i - w + 1 + c": "格子：键 i - w + 1 + c",
    "Receptive field": "感受野",
    "input": "输入",
    "layer 1": "第 1 层",
    "layer 2": "第 2 层",
    "w = 3": "w = 3",
    "3 tokens": "3 个词元",
    "5 tokens": "5 个词元",
    "each layer reaches w - 1 tokens further back:": (
        "每多一层，就能再往回多看 w - 1 个词元："
    ),
    "after L layers, L(w - 1) + 1 tokens": "L 层之后共 L(w - 1) + 1 个词元",
    "in the window": "窗口内",
    "not computed": "不计算",
    # linear-attention-state (book/sparse-linear-attention.md)
    "Linear attention: reorder the product, keep a running state": (
        "线性注意力：调换乘法的顺序，维护一个累积的状态"
    ),
    "first φ(Q) φ(K)ᵀ: an n × n table, O(n² d)": (
        "先算 φ(Q) φ(K)ᵀ：一张 n × n 的表，O(n² d)"
    ),
    "first S = φ(K)ᵀ V: d × d_v numbers, O(n d d_v)": (
        "先算 S = φ(K)ᵀ V：d × d_v 个数，O(n d d_v)"
    ),
    "causal: one token at a time, write then read": (
        "因果形式：一次一个词元，先写入再读取"
    ),
    "carry": "传递",
    "The state has d × d_v numbers at every step, however long the sequence: the "
    "fixed-size memory, now read by a trained query.": (
        "无论序列多长，状态在每一步都只有 d × d_v 个数：这就是固定大小的存储器，"
        "只是现在由训练出来的查询来读取。"
    ),
    # induction-heads (book/tiny-transformer.md)
    "Two heads compose: a previous-token head, then an induction head": (
        "两个头的组合：先是前一词元头，再是归纳头"
    ),
    "tokens (position)": "词元（位置）",
    "after layer 1:": "第 1 层之后：",
    "token + previous": "词元 + 前一个词元",
    "C  (0)": "C  (0)",
    "C": "C",
    "A  (1)": "A  (1)",
    "A | C": "A | C",
    "B  (2)": "B  (2)",
    "B | A": "B | A",
    "D  (3)": "D  (3)",
    "D | B": "D | B",
    "E  (4)": "E  (4)",
    "E | D": "E | D",
    "A  (5)": "A  (5)",
    "A | E": "A | E",
    "layer 1 head:": "第 1 层的头：",
    "attends to i - 1": "关注 i - 1",
    "layer 2 head: the query A attends to the key whose previous token is A": (
        "第 2 层的头：查询 A 关注前一个词元为 A 的那个键"
    ),
    "B": "B",
    "copies B:": "复制 B：",
    "next token": "下一个词元",
    "A B ... A -> B. Induction score of a head: its weight on the token after an "
    "earlier copy of the query's token.": (
        "A B ... A -> B。头的归纳分数：查询的词元此前出现时，"
        "紧随其后的那个词元所得到的权重。"
    ),
    # transformer-block (book/transformer-block.md)
    "Post-LN (Vaswani et al. 2017)": "post-LN（Vaswani 等，2017）",
    "norm after each addition: ON the stream": "每次相加之后归一化：就在残差流上",
    "MHA": "MHA",
    "LN$_1$": "LN$_1$",
    "FFN": "FFN",
    "LN$_2$": "LN$_2$",
    "every path from x to y passes LN$_1$ and LN$_2$": (
        "从 x 到 y 的每条路径都经过 LN$_1$ 和 LN$_2$"
    ),
    "residual": "残差",
    "stream": "流",
    "Pre-LN (Xiong et al. 2020)": "pre-LN（Xiong 等，2020）",
    "norm inside each branch: stream untouched": "在每个分支内部归一化：残差流不受影响",
    "final LN": "最终 LN",
    "once, after the last": "只在最后一个块之后",
    "block: not part of $y$": r"做一次：不属于 $y$",
    "stream = x + branch outputs: an identity path from x": (
        "残差流 = x + 各分支输出：从 x 出发有一条恒等路径"
    ),
}
