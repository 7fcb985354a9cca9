//! Runtime selector: the single definition of every routing formula (Q table, standardiser, estimators, guard, triggers) and the frozen bundle.
