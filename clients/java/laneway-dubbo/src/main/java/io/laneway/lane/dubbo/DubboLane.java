package io.laneway.lane.dubbo;

import io.laneway.lane.Lane;
import org.apache.dubbo.common.constants.CommonConstants;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.RpcContextAttachment;

/**
 * Where a lane lives in Dubbo: the {@code dubbo.tag} attachment of an invocation (what Dubbo's
 * tag router reads), and, on the provider side, a laneway key in the server attachment, which
 * Dubbo hands to the thread that takes over an async call ({@code AsyncContext.signalContextSwitch}).
 */
public final class DubboLane {
    /** The attachment Dubbo's {@code TagStateRouter} routes by. */
    public static final String TAG_KEY = CommonConstants.TAG_KEY;

    /**
     * The server-attachment key under which the provider filter keeps the lane of the call being
     * served. The consumer filter removes it from outgoing invocations, so it never goes on the wire.
     */
    public static final String SERVER_LANE_KEY = "laneway.lane";

    private DubboLane() {}

    /** The lane an incoming or outgoing invocation carries as its {@code dubbo.tag}, if valid. */
    public static String lane(Invocation invocation) {
        Object tag = invocation.getObjectAttachmentWithoutConvert(TAG_KEY);
        return tag instanceof String && Lane.isValid((String) tag) ? (String) tag : null;
    }

    /**
     * The lane of the async call this thread took over, or {@code null}: read from the server
     * attachment only once the call went async, since on the serving thread the lane set by the
     * provider filter is authoritative and the attachment may outlive the call.
     */
    public static String asyncServerLane() {
        RpcContextAttachment server = RpcContext.getServerAttachment();
        if (!server.isAsyncStarted()) {
            return null;
        }
        Object lane = server.getObjectAttachment(SERVER_LANE_KEY);
        return lane instanceof String ? (String) lane : null;
    }

    // writes only on a change, so that a thread serving one lane after another allocates nothing
    static void publishServerLane(String lane) {
        RpcContextAttachment server = RpcContext.getServerAttachment();
        Object held = server.getObjectAttachment(SERVER_LANE_KEY);
        if (lane == null) {
            if (held != null) {
                server.removeAttachment(SERVER_LANE_KEY);
            }
        } else if (!lane.equals(held)) {
            server.setObjectAttachment(SERVER_LANE_KEY, lane);
        }
    }
}
