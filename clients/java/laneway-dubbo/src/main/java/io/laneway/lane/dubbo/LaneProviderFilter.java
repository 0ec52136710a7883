package io.laneway.lane.dubbo;

import io.laneway.lane.Lane;
import io.laneway.lane.LaneMetrics;
import io.laneway.lane.Probe;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.common.constants.CommonConstants;
import org.apache.dubbo.common.extension.Activate;
import org.apache.dubbo.rpc.Filter;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.RpcException;

/**
 * Provider side (SPI name {@code laneway-provider}): the lane of the call being served is its
 * {@code dubbo.tag}, set as {@link Lane} while the service runs.
 *
 * <p>Dubbo's {@code ContextFilter} drops {@code dubbo.tag} from the server attachment, which is
 * what Dubbo forwards to the next hop, so without this filter the lane is lost after one hop
 * (apache/dubbo#5638); the tag is still on the invocation itself, which is where this reads it.
 * The consumer filter then puts the lane on every call the service makes.
 *
 * <p>Each call is counted by its lane ({@link LaneMetrics}), and a call in no lane whose caller
 * served one (it called through a client without laneway's filter) as lost.
 *
 * <p>A call with a probe mark ({@link Probe#MARK} attachment) is answered with the hop records of
 * this hop and of its onward calls in the server-to-client attachment {@link Probe#HOPS}.
 */
@Activate(group = CommonConstants.PROVIDER, order = LaneProviderFilter.ORDER)
public class LaneProviderFilter implements Filter {
    /**
     * After {@code ContextFilter} ({@link Integer#MIN_VALUE}), which installs the server attachment
     * this filter writes to; before every other built-in provider filter, so they see the lane.
     */
    public static final int ORDER = -200_000;

    @Override
    public Result invoke(Invoker<?> invoker, Invocation invocation) throws RpcException {
        String lane = DubboLane.lane(invocation);
        count(invocation, lane);
        DubboLane.publishServerLane(lane);
        Probe probe = probe(invoker, invocation, lane);
        // a call without a lane must not inherit one from the previous call on this pooled thread
        String previous = Lane.set(lane);
        boolean wasServing = Lane.serving(true);
        try {
            Result result = invoker.invoke(invocation);
            result.whenCompleteWithContext((answer, error) -> {
                if (error != null || answer.hasException()) {
                    LaneMetrics.countFailed(lane);
                }
            });
            return result;
        } catch (RuntimeException e) {
            LaneMetrics.countFailed(lane);
            throw e;
        } finally {
            Lane.serving(wasServing);
            Lane.restore(previous);
            if (probe != null) {
                RpcContext.getServerResponseContext().setObjectAttachment(Probe.HOPS, probe.hops());
                Probe.end(probe);
            }
        }
    }

    // a call in no lane that carries laneway's key for the lane its caller served came through a
    // client without laneway's filter (Dubbo passes the caller's server attachment on)
    private static void count(Invocation invocation, String lane) {
        LaneMetrics.countServed(lane, "tag");
        if (lane == null) {
            Object caller = invocation.getObjectAttachmentWithoutConvert(DubboLane.SERVER_LANE_KEY);
            if (caller instanceof String && Lane.isValid((String) caller)) {
                LaneMetrics.countLost((String) caller);
            }
        }
    }

    // a probed call ({@code kubectl laneway probe}): this hop's record, named by its application
    private static Probe probe(Invoker<?> invoker, Invocation invocation, String lane) {
        Object mark = invocation.getObjectAttachmentWithoutConvert(Probe.MARK);
        if (!(mark instanceof String)) {
            return null;
        }
        URL url = invoker.getUrl();
        String app = url == null ? null : url.getApplication();
        return Probe.begin((String) mark, app, null, lane, "tag");
    }
}
