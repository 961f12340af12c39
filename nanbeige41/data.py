"""Conversation data for SFT (and the prompt sets of GRPO / the reward models): read, check, tokenise, pack, mix.

Paper section 2.1.1 trains on conversations of five domains (code, deep search, STEM, tool use, general) with a
length curriculum; this module is the data side of that:

- `read_jsonl(path)`: records of a JSONL file; a malformed line fails with `file:line` and what is wrong, an empty
  file is an error.
- `check_conversation(record)`: why a conversation cannot be trained on (no assistant turn, unknown role, a tool
  result with no preceding tool call, ...) or None. `check_loss_flags(record)`: the optional per-message
  `"loss": false` on assistant messages (that turn stays in the context, out of the loss) must be a boolean. `load_conversations(specs)` reports and skips those with a count
  per reason, or raises under `strict`.
- `tokenize(records, tokenizer)`: `encode_chat` ids plus the assistant-only loss mask, per document; a `{"text": ...}`
  record (no `messages`) is a pretraining document, trained on every token (domain `pretrain`).
- `pack(docs, seq_len)`: best-fit-decreasing packing into rows of `seq_len` tokens. Each document keeps its own
  positions (restarting at 0), which the model turns into block-diagonal causal attention (model.py). Documents
  longer than `seq_len` are truncated or dropped (`overflow`), and counted.
- `MixtureStream`: the domain-mixture sampler. It draws documents by the stage's domain ratios, packs them pool
  by pool and serves rows in a fixed order derived from (seed, stage); its state is one counter, so resume is exact.

Row format (what the trainer consumes): `input_ids`, `position_ids`, `targets` and `loss_mask`, each a list of
`seq_len` ints. `targets[i]` is the token after position i *in the same document*; `loss_mask[i]` is 1 when that
next token was written by the assistant. The last token of a document and padding predict nothing (mask 0).
"""

import bisect
import json
import os
import random
from collections import Counter

DOMAINS = ("code", "search", "stem", "tool", "general")  # of conversations; {"text"} records are "pretrain"
ROLES = ("system", "user", "assistant", "tool")


# -----------------------------------------------------------------------------
# reading and checking

def read_jsonl(path):
    """All records of a JSONL file (blank lines skipped). Raises ValueError naming `file:line` for a line that is
    not a JSON object, and for a file with no records at all."""
    records = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: malformed JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            record["_source"] = f"{path}:{lineno}"
            records.append(record)
    if not records:
        raise ValueError(f"{path}: empty data file (no records)")
    return records


def write_jsonl(path, records):
    """One JSON object per line, keys in insertion order, UTF-8 (same records -> same bytes)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def check_conversation(record):
    """Why this record cannot be trained on, as a short reason (also the key of the skip counts), or None.
    A record with `text` and no `messages` is a pretraining document: every token is trained on."""
    if "text" in record and "messages" not in record:
        return None if isinstance(record["text"], str) and record["text"].strip() else "empty or non-string text"
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        return "no messages list"
    open_calls = 0  # tool calls of the last assistant turn not yet answered by a tool message
    for m in messages:
        if not isinstance(m, dict):
            return "message is not an object"
        role = m.get("role")
        if role not in ROLES:
            return f"unknown role {role!r}"
        if role == "tool":
            if open_calls == 0:
                return "tool message with no preceding tool call"
            open_calls -= 1
        elif role == "assistant":
            open_calls = len(m.get("tool_calls") or [])
        else:
            open_calls = 0
    if not any(m["role"] == "assistant" for m in messages):
        return "no assistant turn"
    if not any(m["role"] == "assistant" and m.get("loss", True) is not False for m in messages):
        return "every assistant turn has loss false"
    if record.get("domain") is not None and record["domain"] not in DOMAINS:
        return f"unknown domain {record['domain']!r}"
    return None


def check_loss_flags(record):
    """Per-message loss flags: `"loss": false` on an assistant message keeps that turn in the context but out of
    the loss (turn-level filtering of search trajectories, paper 2.2.1: the trajectory stays, the failing turn
    does not train). The flag is optional (default true), must be a JSON boolean and only assistant messages may
    carry it. A wrong one raises ValueError naming `file:line`, strict or not: skipping the record would silently
    change what is trained on, and guessing could train on a turn its writer meant to exclude."""
    messages = record.get("messages")
    for i, m in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(m, dict) or "loss" not in m:
            continue
        where = f"{record.get('_source', '?')}: messages[{i}].loss"
        if not isinstance(m["loss"], bool):
            raise ValueError(f"{where}: expected true or false, got {json.dumps(m['loss'])}")
        if m.get("role") != "assistant":
            raise ValueError(f"{where}: only assistant messages are trained on, this one is {m.get('role')!r}")


def parse_data_spec(spec):
    """`path`, or `name:path:weight` (a domain name, a JSONL path, a mixture weight) -> (name, path, weight).
    With a bare path the name is None (each record's own `domain` field decides) and the weight is None."""
    parts = spec.split(":")
    if len(parts) == 3 and parts[0] and parts[2]:
        name, path, weight = parts
        try:
            weight = float(weight)
        except ValueError:
            raise ValueError(f"--data {spec!r}: weight {weight!r} is not a number") from None
        if weight < 0:
            raise ValueError(f"--data {spec!r}: negative weight")
        return name, path, weight
    return None, spec, None


def load_conversations(paths, strict=False, log=print):
    """Read and check conversations from several JSONL files.

    paths: list of paths, or of (domain, path) pairs where the domain overrides the records' own `domain`.
    Records that fail `check_conversation` are skipped and counted per reason (log prints the counts); under
    `strict` the first one raises ValueError with its `file:line`. Returns (records, skipped Counter)."""
    records, skipped = [], Counter()
    for item in paths:
        domain, path = item if isinstance(item, tuple) else (None, item)
        for r in read_jsonl(path):
            check_loss_flags(r)
            problem = check_conversation(r)
            if problem is not None:
                if strict:
                    raise ValueError(f"{r['_source']}: {problem}")
                skipped[problem] += 1
                continue
            r["domain"] = domain or r.get("domain") or ("pretrain" if "text" in r and "messages" not in r else "general")
            records.append(r)
    if skipped:
        log(f"data: skipped {sum(skipped.values())} conversation(s): "
            + ", ".join(f"{n} x {why}" for why, n in sorted(skipped.items())))
    if not records:
        raise ValueError(f"no usable conversations in {[p if isinstance(p, str) else p[1] for p in paths]}")
    return records, skipped


def tokenize(records, tokenizer, strict=False, log=print):
    """Documents {ids, mask, domain} from checked records, through tokenizer.encode_chat (mask 1 on assistant
    tokens). A record the chat format itself rejects (e.g. a malformed tool call) is skipped and counted like a
    failed check, or raises under strict."""
    docs, skipped = [], Counter()
    for r in records:
        if "messages" not in r:  # a pretraining document (the toy base model's text): next-token loss everywhere
            ids = tokenizer.encode(r["text"]) + [tokenizer.endoftext_id]
            docs.append(dict(ids=ids, mask=[1] * len(ids), domain=r.get("domain", "pretrain")))
            continue
        try:
            ids, mask = tokenizer.encode_chat(r["messages"], tools=r.get("tools"))
        except ValueError as e:
            if strict:
                raise ValueError(f"{r.get('_source', '?')}: {e}") from None
            skipped[str(e).split(":")[0]] += 1
            continue
        docs.append(dict(ids=ids, mask=mask, domain=r.get("domain", "general")))
    if skipped:
        log(f"data: chat format rejected {sum(skipped.values())} conversation(s): {dict(skipped)}")
    return docs


# -----------------------------------------------------------------------------
# packing

def pack(docs, seq_len, overflow="truncate", pad_id=0):
    """Best-fit-decreasing: documents longest first, each into the open row whose free space fits it most tightly,
    a new row when none does. Returns (rows, stats).

    overflow: a document longer than seq_len is cut to seq_len ("truncate") or left out ("drop").
    stats: documents, truncated, dropped, real_tokens, rows, efficiency = real_tokens / (rows * seq_len),
    loss_tokens (supervised targets), and per-domain document/token counts of what was packed."""
    if overflow not in ("truncate", "drop"):
        raise ValueError(f"overflow must be 'truncate' or 'drop', got {overflow!r}")
    fitted, truncated, dropped = [], 0, 0
    for d in docs:
        if len(d["ids"]) > seq_len:
            if overflow == "drop":
                dropped += 1
                continue
            truncated += 1
            d = dict(d, ids=d["ids"][:seq_len], mask=d["mask"][:seq_len])
        if len(d["ids"]) >= 2:  # a 1-token document predicts nothing
            fitted.append(d)
    # stable sort on length (ties keep input order) so the result is deterministic
    order = sorted(range(len(fitted)), key=lambda i: -len(fitted[i]["ids"]))
    bins = []  # lists of document indices
    free = []  # sorted (free_space, bin_index): bisect finds the tightest bin that still fits
    for i in order:
        n = len(fitted[i]["ids"])
        j = bisect.bisect_left(free, (n, -1))
        if j < len(free):
            space, b = free.pop(j)
        else:
            space, b = seq_len, len(bins)
            bins.append([])
        bins[b].append(i)
        if space - n > 0:
            bisect.insort(free, (space - n, b))
    rows = [_make_row([fitted[i] for i in b], seq_len, pad_id) for b in bins]
    real = sum(len(d["ids"]) for d in fitted)
    stats = dict(documents=len(fitted), truncated=truncated, dropped=dropped, real_tokens=real, rows=len(rows),
                 efficiency=real / (len(rows) * seq_len) if rows else 0.0,
                 loss_tokens=sum(sum(r["loss_mask"]) for r in rows),
                 domain_docs=dict(Counter(d["domain"] for d in fitted)),
                 domain_tokens=dict(_domain_tokens(fitted)))
    return rows, stats


def _domain_tokens(docs):
    c = Counter()
    for d in docs:
        c[d["domain"]] += len(d["ids"])
    return c


def _make_row(docs, seq_len, pad_id):
    input_ids, position_ids, targets, loss_mask, domains = [], [], [], [], []
    for d in docs:
        n = len(d["ids"])
        input_ids += d["ids"]
        position_ids += range(n)  # restart at 0: the model derives the document mask from this
        # next-token targets inside the document; the last token has none
        targets += d["ids"][1:] + [pad_id]
        loss_mask += d["mask"][1:] + [0]
        domains.append(d["domain"])
    pad = seq_len - len(input_ids)
    # padding continues the last document's positions: it sits after every real token, so causal attention
    # keeps real tokens from seeing it, and a one-document row stays on the plain causal (fast) path
    last = position_ids[-1] + 1 if position_ids else 0
    input_ids += [pad_id] * pad
    position_ids += range(last, last + pad)
    targets += [pad_id] * pad
    loss_mask += [0] * pad
    return dict(input_ids=input_ids, position_ids=position_ids, targets=targets, loss_mask=loss_mask,
                n_docs=len(docs), domains=domains, real_tokens=seq_len - pad)


def naive_rows(docs, seq_len):
    """Rows of one conversation each, padded to the longest (capped at seq_len): the baseline packing beats.
    Returns (n_rows, row_len, efficiency)."""
    lengths = [min(len(d["ids"]), seq_len) for d in docs]
    row_len = max(lengths)
    return len(lengths), row_len, sum(lengths) / (len(lengths) * row_len)


# -----------------------------------------------------------------------------
# domain mixture

def normalise_mixture(mixture, available):
    """{domain: weight} -> {domain: probability} over the domains that have documents. A domain asked for but
    absent is an error (a mixture silently missing a domain would train on different ratios than logged)."""
    missing = [d for d, w in mixture.items() if w > 0 and d not in available]
    if missing:
        raise ValueError(f"mixture asks for domain(s) {missing} but the data has none (have {sorted(available)})")
    total = sum(w for w in mixture.values() if w > 0)
    if total <= 0:
        raise ValueError(f"mixture {mixture} has no positive weight")
    return {d: w / total for d, w in mixture.items() if w > 0}


class MixtureStream:
    """Packed rows drawn by domain ratios, in a fixed order given (docs, mixture, seq_len, seed).

    Each domain's documents are visited in a shuffled order (reshuffled when exhausted, i.e. per epoch); each draw
    first picks a domain, then that domain's next document. The ratios are of tokens by default (unit="tokens", the
    reading we take of the paper's "code 27%, deep search 26%, ...": a training mixture is a share of the token
    budget) or of documents (unit="docs"). Documents are drawn until a
    pool holds ~pool_rows * seq_len tokens, the pool is packed best-fit-decreasing, and its rows are served in a
    shuffled order; the partly filled tail rows (fill < tail_fill) go back into the next pool rather than being
    served half empty. State for resume: `rows_served` (re-creating the stream and skipping is exact and cheap).
    Realised ratios (documents and tokens actually served) are in `realised()`."""

    def __init__(self, docs, mixture, seq_len, seed, pool_rows=64, overflow="truncate", pad_id=0, tail_fill=0.9,
                 unit="tokens"):
        by_domain = {}
        for d in docs:
            by_domain.setdefault(d["domain"], []).append(d)
        self.ratios = normalise_mixture(mixture, by_domain)
        self.by_domain = by_domain
        # unit "docs": P(domain) = ratio. unit "tokens": P(domain) ~ ratio / mean document length, so that the
        # *tokens* drawn follow the ratios (a 600-token search trajectory counts 10x a 60-token arithmetic problem)
        if unit not in ("tokens", "docs"):
            raise ValueError(f"mixture unit must be 'tokens' or 'docs', got {unit!r}")
        mean_len = {d: sum(min(len(x["ids"]), seq_len) for x in by_domain[d]) / len(by_domain[d]) for d in self.ratios}
        self.draw_weights = {d: r / (mean_len[d] if unit == "tokens" else 1.0) for d, r in self.ratios.items()}
        self.seq_len, self.pool_rows, self.overflow, self.pad_id = seq_len, pool_rows, overflow, pad_id
        self.tail_fill = tail_fill
        self.rng = random.Random(seed)
        self.order = {d: [] for d in self.ratios}  # remaining shuffled indices per domain
        self.carry = []  # documents of under-filled rows, repacked with the next pool
        self.buffer = []  # packed rows not yet served
        self.rows_served = 0
        self.served_docs, self.served_tokens = Counter(), Counter()
        self.truncated = self.dropped = 0

    def _draw(self):
        domains = list(self.ratios)
        d = self.rng.choices(domains, weights=[self.draw_weights[k] for k in domains])[0]
        if not self.order[d]:
            self.order[d] = list(range(len(self.by_domain[d])))
            self.rng.shuffle(self.order[d])
        return self.by_domain[d][self.order[d].pop()]

    def _refill(self):
        pool, tokens = list(self.carry), sum(min(len(d["ids"]), self.seq_len) for d in self.carry)
        while tokens < self.pool_rows * self.seq_len:
            d = self._draw()
            pool.append(d)
            tokens += min(len(d["ids"]), self.seq_len)
        rows, stats = pack(pool, self.seq_len, self.overflow, self.pad_id)
        self.truncated += stats["truncated"]
        self.dropped += stats["dropped"]
        rows.sort(key=lambda r: -r["real_tokens"])  # stable: ties keep packing order
        full = [r for r in rows if r["real_tokens"] >= self.tail_fill * self.seq_len]
        if not full:  # documents too few or too short to fill a row: serve what there is
            full, rest = rows, []
        else:
            rest = rows[len(full):]
        self.rng.shuffle(full)  # packing put long documents first; serve the pool's rows in random order
        # the documents of the tail rows are rebuilt from the row (a row keeps each document contiguous)
        self.carry = [doc for r in rest for doc in _split_row(r)]
        self.buffer = full

    def next_row(self):
        if not self.buffer:
            self._refill()
        row = self.buffer.pop(0)
        self.rows_served += 1
        for dom, n in zip(row["domains"], _doc_lengths(row["position_ids"], row["real_tokens"])):
            self.served_docs[dom] += 1
            self.served_tokens[dom] += n
        return row

    def skip(self, n_rows):
        """Advance past n_rows rows (resume): same rows, same counters, no training."""
        for _ in range(n_rows):
            self.next_row()

    def realised(self):
        """Realised mixture: {domain: (document share, token share)} over the rows served so far."""
        nd, nt = sum(self.served_docs.values()) or 1, sum(self.served_tokens.values()) or 1
        return {d: (self.served_docs[d] / nd, self.served_tokens[d] / nt) for d in self.ratios}


def _doc_lengths(position_ids, real_tokens):
    """Lengths of the documents of a row, from its positions (a new document wherever the position is 0)."""
    starts = [i for i in range(real_tokens) if position_ids[i] == 0]
    return [b - a for a, b in zip(starts, starts[1:] + [real_tokens])]


def _split_row(row):
    """The documents a row was packed from, back as {ids, mask, domain} (mask realigned from loss_mask)."""
    docs, start = [], 0
    for dom, n in zip(row["domains"], _doc_lengths(row["position_ids"], row["real_tokens"])):
        ids = row["input_ids"][start:start + n]
        # loss_mask[i] is the mask of token i+1; the first token of a document is never an assistant token
        mask = [0] + row["loss_mask"][start:start + n - 1]
        docs.append(dict(ids=ids, mask=mask, domain=dom))
        start += n
    return docs
