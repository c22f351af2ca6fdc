"""Front-end rules: faults found while reading the YAML (K0xx) and the spec's structure (K1xx)."""

from __future__ import annotations

from compiler.diagnostics.model import Severity
from compiler.diagnostics.rules import Rule


# --- K0xx: YAML -------------------------------------------------------------------------------

class YamlSyntax(Rule):
    """The file is not well-formed YAML.

    The parser stops at the first syntax error, so this is the only diagnostic reported for the
    file. The position is where the parser noticed the problem, which is often just after the
    real mistake: check the line above too (a missing colon, an unclosed quote or bracket).
    """

    code = "K001"
    name = "yaml-syntax"


class DuplicateKey(Rule):
    """A mapping defines the same key twice.

    YAML libraries disagree on which value wins (most keep the last, silently). Kiln refuses the
    file instead, so that a reviewer never approves a value that is not the one deployed.
    """

    code = "K002"
    name = "duplicate-key"


class AliasBomb(Rule):
    """The document expands to too many values.

    Anchors and aliases (`&a`, `*a`) are allowed, but nested aliases can multiply a few lines
    into billions of values ("billion laughs"), and merge keys (`<<: [*a, *a]`) can do the same. Kiln
    stops at 100,000 values after expansion. An alias inside the value its own anchor names
    (`x: &x {<<: *x}`, `x: &x [*x]`) would expand without end, and is refused as well.
    """

    code = "K003"
    name = "alias-expansion-limit"


class NonStringKey(Rule):
    """A mapping key is a number, boolean, null or collection.

    Every key in a spec is a name. `8: ...` or `true: ...` is almost always an unquoted value in
    the wrong place; quote the key if you really mean the text.
    """

    code = "K004"
    name = "non-string-key"


class TabIndent(Rule):
    """A tab character is used for indentation.

    YAML forbids tabs in indentation. Editors that mix tabs and spaces make the structure differ
    from what the reader sees. Replace the tabs with spaces.
    """

    code = "K005"
    name = "tab-indentation"


class EmptyFile(Rule):
    """The spec file is empty or holds only comments."""

    code = "K006"
    name = "empty-file"


class TopLevelNotMapping(Rule):
    """The top level of the document is a list or a scalar; a spec is a mapping (`kiln: v1`, ...)."""

    code = "K007"
    name = "top-level-not-mapping"


class FileTooLarge(Rule):
    """The spec file is larger than 1 MiB.

    A hand-written fleet spec is a few kilobytes; a larger file is a generated or wrong file.
    The limit keeps validation fast and bounded. Split large fleets into several specs.
    """

    code = "K008"
    name = "file-too-large"


class NotUtf8(Rule):
    """The spec file is not UTF-8 text (or contains NUL bytes), or a string in it holds a character
    that no UTF-8 text can hold.

    A double-quoted YAML string can write any code point as an escape, including a lone surrogate
    (`"\\ud800"`, half of a UTF-16 pair). No UTF-8 file, artifact or terminal can carry it, so it is
    refused where it is written. Write the character itself, or as `\\U` and 8 hex digits for one
    above U+FFFF (YAML does not join a pair of `\\u` escapes into one character).
    """

    code = "K009"
    name = "not-utf8"


class FileUnreadable(Rule):
    """The spec file (or a file it names) cannot be read: missing, a directory, or no permission."""

    code = "K010"
    name = "file-unreadable"


class TooDeep(Rule):
    """The document nests deeper than 64 levels; no spec field is nested that deep."""

    code = "K011"
    name = "nesting-too-deep"


class MultipleDocuments(Rule):
    """The file holds several YAML documents (separated by `---`); a spec file holds one."""

    code = "K012"
    name = "multiple-documents"


class UnknownTag(Rule):
    """A YAML tag (`!!python/object`, `!Ref`, `!!binary`, ...) is used.

    Specs are plain data. Tags are refused rather than ignored, so that nothing in the file has a
    meaning that the compiler does not see.
    """

    code = "K013"
    name = "unsupported-tag"


class UnsupportedYamlVersion(Rule):
    """A `%YAML` directive asks for a YAML version other than 1.2.

    Kiln reads specs as YAML 1.2, where `yes`, `on` and `010` are a string, a string and ten.
    Under YAML 1.1 the same text means true, true and eight, so a file that asks for 1.1 (or for
    a version that does not exist) would not mean to Kiln what it says to its reviewer. Remove the
    directive, or write `%YAML 1.2`.
    """

    code = "K014"
    name = "yaml-version-unsupported"


class ReusedAnchor(Rule):
    """An anchor name (`&name`) is defined twice.

    YAML allows it: an alias (`*name`) then refers to the most recent definition above it. A
    reader who finds the first definition sees another value than the one deployed, so Kiln warns.
    Give each anchor its own name.
    """

    code = "K015"
    name = "reused-anchor"
    severity = Severity.WARNING


# --- K1xx: spec structure ---------------------------------------------------------------------

class UnknownKey(Rule):
    """A key that the spec does not define.

    Unknown keys are errors everywhere, never ignored: a misspelled `max_batch_szie` would
    otherwise silently leave the default in place. The help line suggests the closest valid key.
    """

    code = "K101"
    name = "unknown-key"


class MissingKey(Rule):
    """A required key is missing."""

    code = "K102"
    name = "missing-key"


class WrongType(Rule):
    """A value has the wrong type (for example a string where a number is expected).

    Kiln does not coerce: `tp: "4"` is an error, not 4, and `tensorrt_llm: 1.2` (a YAML float) is
    an error, not "1.2". Quote versions; write numbers without quotes.
    """

    code = "K103"
    name = "wrong-type"


class OutOfRange(Rule):
    """A number is outside the range the field accepts (for example a memory fraction above 1)."""

    code = "K104"
    name = "out-of-range"


class InvalidChoice(Rule):
    """A value is not one of the field's allowed choices.

    The help line lists the choices and the closest match. Kiln validates names that TensorRT-LLM
    itself would silently replace with a default (an unknown attention backend becomes TRTLLM).
    """

    code = "K105"
    name = "invalid-choice"


class InvalidFormat(Rule):
    """A string does not have the required form.

    Examples: a Triton image that is not pinned by `@sha256:` digest, a Hugging Face revision that
    is not a 40-hex commit, a name with characters that are unsafe in shells and file names.
    """

    code = "K106"
    name = "invalid-format"


class InvalidValue(Rule):
    """A value, or a combination of values within one section, that the spec does not accept.

    Examples: both `huggingface` and `path` in a model source, a list that must not be empty,
    `max_input_len` larger than `max_seq_len`.
    """

    code = "K107"
    name = "invalid-value"


class UnsupportedVersion(Rule):
    """The spec's `kiln:` version is missing or not one this compiler reads (v1)."""

    code = "K108"
    name = "unsupported-spec-version"


class NotAllowedHere(Rule):
    """A key that exists elsewhere in the spec but has no effect at this place.

    Example: clocks or a power limit on a MIG instance. Clocks and power limits are properties
    of the physical GPU and are shared by all of its MIG instances; set them on the host or on
    a `gpus` entry instead.
    """

    code = "K109"
    name = "not-allowed-here"


__all__ = [name for name, obj in list(globals().items()) if isinstance(obj, type) and issubclass(obj, Rule)
           and obj is not Rule]

_ = Severity  # severity defaults to error for every front-end rule
