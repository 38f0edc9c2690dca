"""The known-bug catalogue: buggy variants of each contract, in our own code.

``shipped`` variants re-express behaviour that shipped in an engine (from its
documented behaviour, not its code); ``mutant`` variants are planted bugs of
the kinds real code gets wrong. Each names the properties that catch it and
the canonical minimal counterexample shrinking reaches.
"""
