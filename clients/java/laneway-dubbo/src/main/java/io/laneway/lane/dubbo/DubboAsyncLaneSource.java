package io.laneway.lane.dubbo;

import io.laneway.lane.LaneSource;
import org.apache.dubbo.rpc.RpcContext;

/**
 * Lets {@link io.laneway.lane.Lane#current()} see the lane of an async Dubbo call on the thread
 * that took it over with {@code AsyncContext.signalContextSwitch()}: Dubbo restores its server
 * attachment there, not laneway's thread-local. Registered in {@code META-INF/services}.
 */
public final class DubboAsyncLaneSource implements LaneSource {
    // resolved when the ServiceLoader instantiates this, so that without Dubbo on the class path
    // the source is skipped there instead of failing in every Lane.current()
    private static final Class<?> DUBBO = RpcContext.class;

    @Override
    public String lane() {
        return DubboLane.asyncServerLane();
    }
}
