"""Diagnostics: the record, the rule registry, and output formats."""

from .model import Diagnostic, Severity, Span, sort_diagnostics
from .rules import Rule, all_rules, get_rule

__all__ = ["Diagnostic", "Severity", "Span", "sort_diagnostics", "Rule", "all_rules", "get_rule"]
