"""The graph index and fast candidate subgraphs for ``debug reduce``.

The top graph is indexed once: its nodes in topological order (Constant nodes apart:
they are *attached*, included whenever a kept node reads them, never turned into
inputs), what each node reads (its non-empty inputs plus the outer tensors that its
If/Loop/Scan bodies read) and writes, who produces and who consumes each tensor.

A *candidate* is a set of node positions, held as a Python int bit mask. Its model is
built without copying any ONNX message: every node, initializer and value info is
serialized once, and a candidate's bytes are the concatenation of those pieces with the
protobuf field headers in front (a repeated field is just tag + length + bytes, again and
again), so one candidate costs one ``bytes.join``.

No Typer or Rich here.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import onnx
from onnx import TensorProto, helper, numpy_helper

from toolkit.core.text import shown_name
from toolkit.core.errors import InputError
from toolkit.core.graph.constants import is_constant_node
from toolkit.core.graph.graphs import node_subgraphs, stable_topological_order, walk_graphs
from toolkit.core.meta import TensorMeta, dtype_to_onnx, is_dtype_name
from toolkit.core.io.model import atomic_output, save_model
from toolkit.core.io.protowire import encode_field, field_header, scan_fields
from toolkit.core.shapes import node_reads
from toolkit.core.io.weights import is_ref, ref_nbytes, relinked
from toolkit.search.masks import mask_indices
from toolkit.reduce.metas import MetaProvider
from toolkit.reduce.pieces import RawPieces, field_numbers, write_chunks

# Above this many bytes a candidate is written with its weights as external data.
BIG_MODEL_BYTES = int(1.8 * 2**30)


# ---------------------------------------------------------------------- the index


@dataclass
class Candidate:
    """A subgraph of the indexed model: node set, boundary tensors and (lazily) its bytes."""

    mask: int
    nodes: List[int]
    inputs: List[str]
    outputs: List[str]
    consts: List[int] = field(repr=False, default_factory=list)
    inits: List[str] = field(repr=False, default_factory=list)
    produced: set = field(repr=False, default_factory=set)
    keep_inputs: bool = False
    size_hint: int = 0
    refs: List[str] = field(repr=False, default_factory=list)  # initializers whose data is still on disk
    folded: List[str] = field(default_factory=list)  # cut tensors written as constants (values of the full model)
    index: Optional["GraphIndex"] = field(repr=False, default=None)
    _data: Optional[list] = field(repr=False, default=None)

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    def chunks(self) -> list:
        """The candidate's ModelProto bytes as a list of buffers (slices shared with the index).

        Initializers named in :attr:`refs` are in it as references into the source model's
        external data files (relative to its folder): only :meth:`GraphIndex.write` makes a
        runnable file of such a candidate."""
        if self._data is None:
            assert self.index is not None, "a candidate made by GraphIndex.candidate"
            self._data = self.index._chunks(self)
        return self._data

    def serialize(self) -> bytes:
        """The candidate's ModelProto bytes, joined."""
        return b"".join(self.chunks())

    @property
    def nbytes(self) -> int:
        return sum(len(c) for c in self.chunks())


def _model_header(model) -> bytes:
    """``model`` serialized without its graph (and training info): what every candidate starts with."""

    header = onnx.ModelProto()
    for fd, value in model.ListFields():
        if fd.name in ("graph", "training_info"):
            continue
        if hasattr(value, "extend"):  # repeated field
            getattr(header, fd.name).extend(value)
        elif hasattr(value, "CopyFrom"):  # message
            getattr(header, fd.name).CopyFrom(value)
        else:
            setattr(header, fd.name, value)
    return header.SerializeToString()


class GraphIndex:
    """The top graph of ``model``, indexed once for building candidate subgraphs.

    ``metas`` is a callable ``names -> {name: TensorMeta}`` giving shape and dtype of
    tensors that become new inputs or outputs of a candidate (default: a
    :class:`MetaProvider` with no options). ``fixed_input_shapes`` names the graph
    inputs whose shapes the user fixed: their original value info is not reused.

    ``external_base_dir``: the folder of the external data files of a ``model`` loaded
    with its big weights left as references (:func:`toolkit.core.io.model.load_lazily`).
    Candidates keep those references, and :meth:`write` copies the bytes each one needs
    from the source files in chunks, so no weight is ever held in memory.
    """

    def __init__(
        self,
        model,
        metas: Optional[Callable] = None,
        *,
        fixed_input_shapes: Sequence[str] = (),
        raw: Optional[RawPieces] = None,
        external_base_dir: Optional[str] = None,
    ):
        self.model = model
        self.warnings: List[str] = []
        self._metas = metas if metas is not None else MetaProvider(model, warn=self.warnings.append)
        self._fixed_inputs = set(fixed_input_shapes)
        self._fields = field_numbers()
        g = model.graph
        regular, consts = self._index_nodes(g)
        self._index_io(model, g)
        self._index_pieces(model, g, raw, regular, consts)
        self._raw = raw
        self._ext_base = external_base_dir
        self._ext_files: Optional[List[str]] = None
        self._ref_names = {t.name for t in g.initializer if is_ref(t)} if external_base_dir is not None else set()
        self._ref_src: Dict[str, str] = {}  # reference -> real path of its data file
        self._spilled: Dict[str, object] = {}  # inline weight -> its reference into the spill file
        self._link_frag: Dict[Tuple[str, str], bytes] = {}
        self._warned: set = set()

    def _index_nodes(self, g) -> Tuple[List[int], List[int]]:
        """Nodes in topological order (Constant nodes apart), what each reads and writes, and
        the producer/consumer masks; returns the positions (in ``g.node``) of regular and constant nodes."""

        all_nodes = list(g.node)
        regular, consts = _split_constants(all_nodes)
        self.nodes = [all_nodes[p] for p in regular]
        self.const_nodes = [all_nodes[p] for p in consts]
        self.size = len(self.nodes)
        self.full_mask = (1 << self.size) - 1
        self._index_node_tables()
        self._index_edges()
        return regular, consts

    def _index_node_tables(self) -> None:
        """What each node reads and writes, its name (made up where it has none) and op type."""
        self.reads: List[Tuple[str, ...]] = [tuple(node_reads(n)) for n in self.nodes]
        self.writes: List[Tuple[str, ...]] = [tuple(o for o in n.output if o) for n in self.nodes]
        self.names = [n.name or f"{n.op_type}_{i}" for i, n in enumerate(self.nodes)]
        self.ops = [n.op_type for n in self.nodes]

    def _index_edges(self) -> None:
        """Which node makes each tensor (Constant nodes apart) and which nodes read it; each node's
        predecessors and successors (bit masks)."""
        self.const_producer: Dict[str, int] = {o: j for j, n in enumerate(self.const_nodes) for o in n.output if o}
        self.producer: Dict[str, int] = {t: i for i, outs in enumerate(self.writes) for t in outs}
        self._index_masks()

    def _index_masks(self) -> None:
        """The readers of each tensor, and each node's predecessors and successors (bit masks)."""
        self.consumer_mask: Dict[str, int] = {}
        self.pred_mask = [0] * self.size
        self.succ_mask = [0] * self.size
        for i, ins in enumerate(self.reads):
            for t in ins:
                self.consumer_mask[t] = self.consumer_mask.get(t, 0) | (1 << i)
                p = self.producer.get(t)
                if p is not None and p != i:
                    self.pred_mask[i] |= 1 << p
                    self.succ_mask[p] |= 1 << i

    def _index_io(self, model, g) -> None:
        self.initializers = {t.name: t for t in g.initializer}
        self.sparse_initializers = {t.values.name: t for t in g.sparse_initializer}
        self.graph_inputs = [vi.name for vi in g.input if vi.name not in self.initializers]
        self.graph_input_set = set(self.graph_inputs)
        self.graph_outputs = [vi.name for vi in g.output]
        self.graph_output_set = set(self.graph_outputs)
        self._index_value_infos(model, g)

    def _index_value_infos(self, model, g) -> None:
        """The model's value infos of its inputs, outputs and inner tensors, by name."""
        self._input_vi = {vi.name: vi for vi in g.input}
        self._output_vi = {vi.name: vi for vi in g.output}
        self._value_info = {vi.name: vi for vi in g.value_info}
        # Old IR versions (< 4) list initializers among the graph inputs too.
        self._init_inputs = model.ir_version < 4

    def _index_pieces(self, model, g, raw: Optional[RawPieces], regular: List[int], consts: List[int]) -> None:
        """The serialized pieces candidates are written from, made once (sliced from ``raw`` when given)."""

        f = self._fields
        self._init_frag: Dict[str, bytes] = {}
        if raw is not None:
            self._slice_pieces(g, raw, regular, consts)
        else:
            self._encode_pieces(model, g)
        self._vi_frag: Dict[Tuple[str, str], bytes] = {}
        self._const_init_frag: Dict[int, bytes] = {}
        self._folded_frag: Dict[str, bytes] = {}
        # names -> {name: numpy array}: values of the full model's tensors (for folded inputs)
        self.fold_values: Optional[Callable] = None
        self._graph_head = _graph_head(g)
        self._qa = {
            qa.tensor_name: encode_field(f["quantization_annotation"], qa.SerializeToString())
            for qa in g.quantization_annotation
        }

    def _encode_pieces(self, model, g) -> None:
        """The pieces serialized from the loaded model."""
        f = self._fields
        self._node_frag = [encode_field(f["node"], n.SerializeToString()) for n in self.nodes]
        self._const_frag = [encode_field(f["node"], n.SerializeToString()) for n in self.const_nodes]
        self._header = _model_header(model)
        self._init_bytes = {t.name: ref_nbytes(t) if is_ref(t) else t.ByteSize() for t in g.initializer}

    def _slice_pieces(self, g, raw: RawPieces, regular: List[int], consts: List[int]) -> None:
        """The pieces as slices of the model file: no message is serialized again."""
        self._node_frag = [raw.nodes[p] for p in regular]
        self._const_frag = [raw.nodes[p] for p in consts]
        self._init_frag.update((t.name, piece) for t, piece in zip(g.initializer, raw.initializers))
        self._init_frag.update((t.values.name, piece) for t, piece in zip(g.sparse_initializer, raw.sparse))
        self._header = raw.header
        self._init_bytes = {t.name: len(piece) for t, piece in zip(g.initializer, raw.initializers)}

    # ------------------------------------------------------------------ identity

    def identity(self) -> str:
        """A digest of the graph's structure (nodes and graph I/O), for replay files."""
        h = hashlib.sha256()
        for frag in self._const_frag + self._node_frag:
            h.update(frag)
        h.update("\0".join(self.graph_inputs).encode())
        h.update(b"\1")
        h.update("\0".join(self.graph_outputs).encode())
        return h.hexdigest()[:32]

    # ------------------------------------------------------------------ structure

    def sinks(self, mask: int) -> List[int]:
        """Nodes of ``mask`` none of whose outputs is read inside ``mask``."""
        return [i for i in mask_indices(mask) if not (self.succ_mask[i] & mask)]

    def sources(self, mask: int) -> List[int]:
        """Nodes of ``mask`` that read nothing produced inside ``mask``."""
        return [i for i in mask_indices(mask) if not (self.pred_mask[i] & mask)]

    def describe(self, i: int) -> str:
        return f"{shown_name(self.names[i])} [Op: {self.ops[i]}]"

    # ------------------------------------------------------------------ candidates

    def _candidate_inputs(self, nodes: List[int], produced: set, keep_inputs: bool, full: bool):
        """(inputs, initializers, Constant nodes) a node set reads from outside itself."""
        inputs: List[str] = list(self.graph_inputs) if keep_inputs else []
        new_inputs, inits, consts = self._sort_reads(self._reads_outside(nodes, set(inputs), produced))
        inputs += new_inputs
        if full:
            # The whole model: keep Constant nodes that feed graph outputs directly.
            consts.update(dict.fromkeys(self.const_producer[t] for t in self.graph_outputs if t in self.const_producer))
            return inputs, inits, sorted(consts)
        return inputs, inits, list(consts)

    def _reads_outside(self, nodes: List[int], declared: set, produced: set) -> List[str]:
        """The tensors the nodes read (in order of first read) that are neither ``declared``
        inputs nor ``produced`` by them."""
        reads = dict.fromkeys(t for i in nodes for t in self.reads[i])
        return [t for t in reads if t not in declared and t not in produced]

    def _sort_reads(self, tensors) -> Tuple[List[str], List[str], Dict[int, None]]:
        """``tensors`` read from outside a node set, sorted into (new inputs, initializers,
        Constant nodes that make them (in order of first read))."""
        inputs: List[str] = []
        inits: List[str] = []
        consts: Dict[int, None] = {}
        for t in tensors:
            if t in self.initializers or t in self.sparse_initializers:
                inits.append(t)
            elif t in self.const_producer:
                consts.setdefault(self.const_producer[t], None)
            else:
                inputs.append(t)
        return inputs, inits, consts

    def _candidate_outputs(self, mask: int, nodes: List[int], keep_inputs: bool, keep_outputs: bool, full: bool):
        """Model outputs the nodes produce (model order), then what nodes left out read."""
        outs_other = [] if keep_outputs else self._inner_outputs(mask, nodes, keep_inputs and not full)
        outputs = self._model_outputs(nodes, full) + outs_other
        if not outputs and nodes:
            # A subgraph must show something: a node whose outputs nobody reads.
            outputs = list(self.writes[nodes[-1]][:1])
        return outputs

    def _model_outputs(self, nodes: List[int], full: bool) -> List[str]:
        """The model outputs the nodes produce (with the whole model, also those Constant nodes
        give), in the model's order."""
        outs = [t for i in nodes for t in self.writes[i] if t in self.graph_output_set]
        if full:
            outs += [t for t in self.graph_outputs if t in self.const_producer and t not in outs]
        order = {t: k for k, t in enumerate(self.graph_outputs)}
        return sorted(outs, key=order.__getitem__)

    def _inner_outputs(self, mask: int, nodes: List[int], own_results: bool) -> List[str]:
        """Tensors the nodes produce that are no model outputs but outputs of the subgraph:
        those a node left out reads, or with ``own_results`` those no kept node reads (the
        subgraph's own results)."""
        inner = [t for i in nodes for t in self.writes[i] if t not in self.graph_output_set]
        if own_results:
            return [t for t in inner if not self.consumer_mask.get(t, 0) & mask]
        return [t for t in inner if self.consumer_mask.get(t, 0) & ~mask]

    def candidate(self, mask: int, *, keep_inputs: bool = False, keep_outputs: bool = False) -> Candidate:
        """The subgraph made of the nodes in ``mask``.

        Inputs: tensors read but not produced by the nodes, except initializers and
        Constant outputs (those come along). Outputs: tensors produced by the nodes that
        are graph outputs of the model or read by nodes left out. ``keep_inputs`` declares
        all of the model's inputs, and its outputs are then only the model outputs kept and
        the tensors no kept node reads (no extra outputs where a removed branch read from).
        ``keep_outputs`` makes only model outputs outputs; its new inputs that join a path
        the subgraph computes itself (a side branch removed) are folded into constants with
        the full model's values (:attr:`fold_values`), so only the inputs on the cut remain.
        """
        nodes = mask_indices(mask)
        produced = {t for i in nodes for t in self.writes[i]}
        full = mask == self.full_mask
        inputs, inits, consts = self._candidate_inputs(nodes, produced, keep_inputs, full)
        outputs = self._candidate_outputs(mask, nodes, keep_inputs, keep_outputs, full)
        folded: List[str] = []
        if keep_outputs and not full and self.fold_values is not None:
            inputs, folded = self._split_folded(inputs, mask, produced)
        size_hint, refs = self._weights_of(inits)
        return Candidate(
            mask,
            nodes,
            inputs,
            outputs,
            consts,
            inits,
            produced,
            keep_inputs,
            size_hint=size_hint,
            refs=refs,
            index=self,
            folded=folded,
        )

    def _weights_of(self, inits: List[str]) -> Tuple[int, List[str]]:
        """(their bytes, those whose data is still on disk) of the initializers ``inits``."""
        return sum(self._init_bytes.get(t, 0) for t in inits), [t for t in inits if t in self._ref_names]

    def _split_folded(self, inputs: List[str], mask: int, produced: set) -> Tuple[List[str], List[str]]:
        """(inputs kept, inputs folded into constants): inputs that are not the model's and join a
        path the subgraph computes itself are folded."""
        kept: List[str] = []
        folded: List[str] = []
        for t in inputs:
            (folded if t not in self.graph_input_set and self._joins_own_path(t, mask, produced) else kept).append(t)
        return kept, folded

    def _joins_own_path(self, t: str, mask: int, produced) -> bool:
        """Every kept reader of ``t`` also reads a tensor the subgraph computes itself."""
        readers = self.consumer_mask.get(t, 0) & mask
        if not readers:
            return False
        for i in mask_indices(readers):
            if not any(r in produced for r in self.reads[i] if r != t):
                return False
        return True

    def _chunks(self, cand: Candidate, weights: bool = True, links: Optional[Mapping[str, str]] = None) -> list:
        parts: List[bytes] = [self._graph_head]
        parts.extend(self._node_frag[i] for i in cand.nodes)
        parts.extend(self._const_tensor_frag(j) for j in cand.consts)  # Constant nodes lowered to tensors
        if cand.folded:
            parts.extend(self._folded_frags(cand.folded))
        if weights:
            parts.extend(self._weight_frags(cand.inits, links))
        parts.extend(self._io_frags(cand))
        parts.extend(self._qa_frags(cand))
        length = sum(len(p) for p in parts)
        return [self._header, field_header(self._fields["graph"], length)] + parts

    def _qa_frags(self, cand: Candidate) -> List[bytes]:
        """The quantization annotations of the candidate's tensors."""
        if not self._qa:
            return []
        names = list(cand.inputs) + sorted(cand.produced) + cand.inits
        return [self._qa[t] for t in names if t in self._qa]

    def _weight_frags(self, inits: List[str], links: Optional[Mapping[str, str]]) -> List[bytes]:
        """The initializers ``inits``: linked to their files in ``links`` where that may be, else as they are."""
        return [
            self._linked_frag(t, links) if links is not None and self._linkable(t, links) else self._initializer_frag(t)
            for t in inits
        ]

    def _io_frags(self, cand: Candidate) -> List[bytes]:
        """The graph inputs, outputs and value infos of a candidate."""
        metas = self._need_metas(cand)
        parts = self._value_info_frags("input", cand.inputs, metas) + self._init_input_frags(cand)
        parts += self._value_info_frags("output", cand.outputs, metas)
        outs = set(cand.outputs)
        inner = [t for t in sorted(cand.produced) if t in self._value_info and t not in outs]
        return parts + self._value_info_frags("value_info", inner, metas)

    def _init_input_frags(self, cand: Candidate) -> List[bytes]:
        """The graph inputs that list the candidate's initializers, as the model does (IR version < 4)."""
        if not self._init_inputs:
            return []
        vis = [self._input_vi[t] for t in cand.inits if t in self._input_vi]
        return [encode_field(self._fields["input"], vi.SerializeToString()) for vi in vis]

    def _const_tensor_frag(self, j: int) -> bytes:
        """Constant node ``j`` as an initializer fragment (a sparse one stays a node)."""
        frag = self._const_init_frag.get(j)
        if frag is None:
            import onnx

            node = onnx.NodeProto()
            node.ParseFromString(bytes(RawPieces.payload(self._const_frag[j])))
            tensor = constant_node_tensor(node)
            if tensor is None or len(node.output) != 1:
                frag = self._const_frag[j]
            else:
                frag = encode_field(self._fields["initializer"], tensor.SerializeToString())
            self._const_init_frag[j] = frag
        return frag

    def _folded_frags(self, names: Sequence[str]) -> List[bytes]:
        missing = [t for t in names if t not in self._folded_frag]
        if missing:
            self._fold(missing)
        return [self._folded_frag[t] for t in names]

    def _fold(self, names: List[str]) -> None:
        """The initializer pieces of the tensors ``names``, with the full model's values."""
        assert self.fold_values is not None, "folded inputs need fold_values"
        values = self.fold_values(names)
        for t in names:
            tensor = numpy_helper.from_array(values[t], name=t)
            self._folded_frag[t] = encode_field(self._fields["initializer"], tensor.SerializeToString())

    def _initializer_proto(self, name: str):
        """The full initializer (from the file's bytes when the index holds only a stub)."""

        if self._raw is None:
            return self.initializers.get(name) or self.sparse_initializers[name]
        frag = self._initializer_frag(name)
        msg = onnx.TensorProto() if name in self.initializers else onnx.SparseTensorProto()
        msg.ParseFromString(bytes(RawPieces.payload(frag)))
        return msg

    def _initializer_frag(self, name: str) -> bytes:
        frag = self._init_frag.get(name)
        if frag is None:
            f = self._fields
            if name in self.initializers:
                frag = encode_field(f["initializer"], self.initializers[name].SerializeToString())
            else:
                frag = encode_field(f["sparse_initializer"], self.sparse_initializers[name].SerializeToString())
            self._init_frag[name] = frag
        return frag

    def _ref_file(self, name: str) -> str:
        src = self._ref_src.get(name)
        if src is None:
            from toolkit.core.io.weights import ref_source

            assert self._ext_base is not None, "references exist only with an external-data folder"
            src = self._ref_src[name] = os.path.realpath(ref_source(self.initializers[name], self._ext_base)[0])
        return src

    def _linkable(self, name: str, links: Mapping[str, str]) -> bool:
        """Is ``name`` a weight on disk whose file ``links`` reaches?"""
        if name in self._spilled:
            return self._ref_src[name] in links
        return name in self._ref_names and self._ref_file(name) in links

    def _linked_frag(self, name: str, links: Mapping[str, str]) -> bytes:
        """The reference ``name`` pointing at its source file's location in ``links``."""

        location = links[self._ref_file(name)]
        key = (name, location)
        frag = self._link_frag.get(key)
        if frag is None:
            tensor = relinked(self._spilled.get(name) or self.initializers[name], location)
            frag = self._link_frag[key] = encode_field(self._fields["initializer"], tensor.SerializeToString())
        return frag

    def _need_metas(self, cand: Candidate) -> Dict[str, TensorMeta]:
        """Metas of the boundary tensors whose original value info cannot be reused."""
        need = self._without_vi("input", cand.inputs)
        outs = self._without_vi("output", cand.outputs)
        if not (need or outs) or self._metas is None:
            return {}
        # dtype and rank of every new input and output (onnx.checker wants both)
        return self._metas(need + outs)

    def _without_vi(self, kind: str, names: List[str]) -> List[str]:
        """The tensors of ``names`` whose original value info cannot be reused as their ``kind``."""
        return [t for t in names if self._original_vi(kind, t) is None]

    def _value_info_frags(self, kind: str, names: List[str], metas: Dict[str, TensorMeta]) -> List[bytes]:
        return [self._value_info_frag(kind, t, metas) for t in names]

    def _value_info_frag(self, kind: str, name: str, metas: Dict[str, TensorMeta]) -> bytes:
        key = (kind, name)
        frag = self._vi_frag.get(key)
        if frag is not None:
            return frag
        vi = self._original_vi(kind, name)
        if vi is None:
            vi = self._make_value_info(name, metas.get(name))
        frag = encode_field(self._fields[kind], vi.SerializeToString())
        self._vi_frag[key] = frag
        return frag

    def _original_vi(self, kind: str, name: str):
        """The model's own value info of ``name``, where a candidate may reuse it as its ``kind``
        ("input", "output" or "value_info"): not for an input whose shape the user fixed, nor for
        outputs once any input shape is fixed; else None."""
        if kind == "input":
            return self._input_vi.get(name) if name not in self._fixed_inputs else None
        if kind == "output":
            return self._output_vi.get(name) if not self._fixed_inputs else None
        return self._value_info[name]

    def _make_value_info(self, name: str, meta: Optional[TensorMeta]):
        if meta is not None and meta.dtype and is_dtype_name(meta.dtype):
            return _tensor_value_info(name, meta.dtype, meta.shape)
        # Not a plain tensor, or unknown: reuse whatever the model says about it.
        for table in (self._value_info, self._input_vi, self._output_vi):
            if name in table:
                return table[name]
        self._warn_untyped(name)
        return onnx.ValueInfoProto(name=name)

    def _warn_untyped(self, name: str) -> None:
        """A warning (once per tensor) that ``name`` is declared without a type."""
        if name not in self._warned:
            self._warned.add(name)
            self.warnings.append(
                f"the dtype of tensor '{name}' is unknown, so the subgraph declares it without a type; "
                "give --model-input-shapes or --force-fallback-shape-inference"
            )

    # ------------------------------------------------------------------ saving

    def write(
        self, cand: Candidate, path: str, *, atomic: bool = True, links: Optional[Mapping[str, str]] = None
    ) -> None:
        """Write the candidate's model to ``path`` (weights external when huge).

        A candidate with weights still on disk (:attr:`Candidate.refs`) is written with
        those weights copied in chunks from the source files: into the one file, or into
        ``<path>.data`` when huge. Either way the file runs from any folder.

        ``links`` (from :func:`toolkit.core.io.weights.link_data_files` for ``path``'s folder)
        writes it zero-copy instead: its references keep their offsets into the source
        files, reached through the locations given there (nothing is copied; the file
        runs where those locations are).
        """

        if links is not None and self.on_disk(cand) and self._inline_bytes(cand, links) <= BIG_MODEL_BYTES:
            write_chunks(path, self._chunks(cand, links=links), atomic=atomic)
        elif cand.refs or cand.size_hint > BIG_MODEL_BYTES:
            self._save_model(cand, path)
        else:
            write_chunks(path, cand.chunks(), atomic=atomic)

    def _inline_bytes(self, cand: Candidate, links: Mapping[str, str]) -> int:
        """The bytes of the candidate's weights that ``links`` does not reach (written inline)."""
        return sum(self._init_bytes.get(t, 0) for t in cand.inits if not self._linkable(t, links))

    def _save_model(self, cand: Candidate, path: str) -> None:
        """Write a candidate with weights on disk (copied from their files), or a huge one (its
        weights external)."""
        big = cand.size_hint > BIG_MODEL_BYTES
        if not cand.refs:
            save_model(self.to_model(cand), path, external_data=True)
            return
        if big:
            self._check_not_a_source(path + ".data", path)
        save_model(self.to_model(cand), path, external_data=big, external_base_dir=self._ext_base)

    def on_disk(self, cand: Candidate) -> bool:
        """Does the candidate use weights that a link can reach (external or spilled)?"""
        return bool(cand.refs) or any(t in self._spilled for t in cand.inits)

    def data_files(self) -> List[str]:
        """Real paths of every file the candidates' weights may be read from by reference."""
        return self.external_files() + sorted(set(self._ref_src[n] for n in self._spilled))

    def spillable_bytes(self, min_bytes: int = 1 << 20) -> int:
        """Bytes of the inline weights a spill would move (those of ``min_bytes`` or more)."""
        if self._raw is None:
            return 0
        return sum(n for t, n in self._init_bytes.items() if n >= min_bytes and t in self.initializers)

    def spill(self, path: str, min_bytes: int = 1 << 20) -> int:
        """Write the raw data of the big inline weights once to ``path``; from then on,
        writes with links refer to it instead of copying the weights again. Returns the
        bytes written (weights stored in typed fields rather than raw_data stay inline)."""

        if self._raw is None:
            return 0
        location = os.path.basename(path)
        written = 0
        real = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), location)
        with atomic_output(path, "wb") as out:  # (never through a link left there)
            for t in self.initializers:
                frag = self._init_frag.get(t)
                if frag is None or self._init_bytes.get(t, 0) < min_bytes:
                    continue
                spilled = _spill_tensor(self._raw, RawPieces.payload(frag), out, location)
                if spilled is not None:
                    self._spilled[t], length = spilled
                    self._ref_src[t] = real
                    written += length
        return written

    def external_files(self) -> List[str]:
        """Real paths of the external data files the candidates' references point into."""
        if self._ext_base is None:
            return []
        if self._ext_files is None:

            from toolkit.core.io.weights import ref_source

            files = {ref_source(self.initializers[n], self._ext_base)[0] for n in self._ref_names}
            self._ext_files = sorted(os.path.realpath(f) for f in files)
        return self._ext_files

    def _check_not_a_source(self, target: str, path: str) -> None:
        if os.path.realpath(target) in self.external_files():
            raise InputError(
                f"{path}: its weights would be written to {target}, which holds the model's own weights "
                "that it is copied from; choose another output name"
            )

    def to_model(self, cand: Candidate):
        """The candidate as an ``onnx.ModelProto`` (for huge ones, weights added as protos)."""

        m = onnx.ModelProto()
        if cand.size_hint > BIG_MODEL_BYTES:
            m.ParseFromString(b"".join(self._chunks(cand, weights=False)))
            for t in cand.inits:
                if t in self.initializers:
                    m.graph.initializer.append(self._initializer_proto(t))
                else:
                    m.graph.sparse_initializer.append(self._initializer_proto(t))
            return m
        m.ParseFromString(cand.serialize())
        return m


def constant_node_tensor(node):
    """The TensorProto a ``Constant`` node produces (named as its output), or None (sparse)."""

    if not node.attribute:
        return None
    a = node.attribute[0]
    name = node.output[0] if node.output else ""
    if a.name == "value":
        t = type(a.t)()
        t.CopyFrom(a.t)
        t.name = name
        return t

    simple = {
        "value_float": (TensorProto.FLOAT, [], [a.f]),
        "value_floats": (TensorProto.FLOAT, [len(a.floats)], list(a.floats)),
        "value_int": (TensorProto.INT64, [], [a.i]),
        "value_ints": (TensorProto.INT64, [len(a.ints)], list(a.ints)),
        "value_string": (TensorProto.STRING, [], [a.s]),
        "value_strings": (TensorProto.STRING, [len(a.strings)], list(a.strings)),
    }
    if a.name not in simple:
        return None
    dtype, dims, vals = simple[a.name]
    return helper.make_tensor(name, dtype, dims, vals)


def _spill_tensor(pieces: RawPieces, body, out, location: str):
    """Append the raw data of the serialized tensor ``body`` (a piece of the model file cut into
    ``pieces``) to ``out``: (the tensor without it, referring to it in file ``location``; its
    length), or None (nothing written) unless its values are in raw_data alone."""
    fields = scan_fields(body)
    raw = [(s, p, e) for num, s, p, e in fields if num == 9]
    if len(raw) != 1 or any(num in (4, 5, 6, 7, 10, 11, 13, 14) for num, *_ in fields):
        return None
    _, p0, p1 = raw[0]
    offset = out.tell()
    for c in range(p0, p1, 16 << 20):
        out.write(body[c : min(c + (16 << 20), p1)])
        pieces.release_pages()  # read once: no need to keep the file's pages
    return _external_stub(body, fields, (("location", location), ("offset", str(offset)), ("length", str(p1 - p0)))), p1 - p0


def _external_stub(body, fields, external_data) -> onnx.TensorProto:
    """The serialized tensor ``body`` (its ``fields`` scanned) without its raw data, referring to
    it by ``external_data`` ((key, value) pairs)."""
    stub = onnx.TensorProto()
    stub.ParseFromString(b"".join(bytes(body[s:e]) for num, s, _, e in fields if num != 9))
    stub.data_location = onnx.TensorProto.EXTERNAL
    for key, value in external_data:
        entry = stub.external_data.add()
        entry.key, entry.value = key, value
    return stub


def _graph_head(g) -> bytes:
    """The graph's own fields (name, doc string, metadata), serialized."""
    head = onnx.GraphProto()
    head.name = g.name
    if g.doc_string:
        head.doc_string = g.doc_string
    head.metadata_props.extend(g.metadata_props)
    return head.SerializeToString()


def _tensor_value_info(name: str, dtype: str, shape):
    """A value info of tensor ``name`` of ``dtype`` and (where known) ``shape``."""
    vi = onnx.ValueInfoProto(name=name)
    tt = vi.type.tensor_type
    tt.elem_type = dtype_to_onnx(dtype)
    if shape is None:
        return vi
    tt.shape.SetInParent()
    for d in shape:
        _set_dim(tt.shape.dim.add(), d)
    return vi


def _set_dim(dim, d) -> None:
    """A dimension: its value (a size), its name (a symbol), or unknown (anything else)."""
    if isinstance(d, int) and d >= 0:
        dim.dim_value = d
    elif isinstance(d, str) and d:
        dim.dim_param = d


def _split_constants(nodes) -> Tuple[List[int], List[int]]:
    """(positions of the regular nodes, of the Constant nodes) of ``nodes``, each in topological order."""
    order = _topological_order(nodes, node_reads)
    consts = [p for p in order if is_constant_node(nodes[p])]
    const_set = set(consts)
    return [p for p in order if p not in const_set], consts


def _topological_order(nodes, node_reads) -> List[int]:
    """Positions of ``nodes`` in a topological order, stable (original order where possible)."""
    order = stable_topological_order(nodes, node_reads)
    if len(order) != len(nodes):
        done = set(order)
        stuck = next(nodes[p] for p in range(len(nodes)) if p not in done)
        raise InputError(
            f"the graph has a cycle (node '{stuck.name or stuck.op_type}' depends on its own output); "
            "it cannot be reduced"
        )
    return order


def body_node_count(nodes, mask: int) -> int:
    """The number of nodes in the bodies of the one If/Loop/Scan node ``mask`` holds (0 otherwise)."""

    kept = mask_indices(mask)
    if len(kept) != 1 or nodes[kept[0]].op_type not in ("If", "Loop", "Scan"):
        return 0
    return sum(len(g.node) for sub in node_subgraphs(nodes[kept[0]]) for g in walk_graphs(sub))
