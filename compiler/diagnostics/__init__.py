"""Diagnostics: the record, the rule registry, and output formats."""

from .model import Diagnostic, Severity, Span, sort_diagnostics
from .rules import Rule, registered_rules

__all__ = ["Diagnostic", "Severity", "Span", "sort_diagnostics", "Rule", "registered_rules"]
