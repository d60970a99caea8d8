"""Native loops: not yet (the while kernel stays interpreted)."""


def native_loop(op, ctx, cond_block, body_block, owned, interpreted):
    return interpreted
