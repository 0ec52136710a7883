package io.laneway.lane;

/**
 * The lane a hop carries on and how it learnt it: the request's lane as learnt, else the pod's own
 * lane ({@code own}), else none ({@code none}).
 */
record Carried(String lane, String learnt, String own) {
    static Carried of(String requestLane, String learnt) {
        String own = OwnLane.get();
        if (requestLane != null) {
            return new Carried(requestLane, learnt, own);
        }
        return new Carried(own, own != null ? "own" : "none", own);
    }
}
