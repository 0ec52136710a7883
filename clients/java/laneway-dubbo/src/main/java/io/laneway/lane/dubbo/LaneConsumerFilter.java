package io.laneway.lane.dubbo;

import io.laneway.lane.Lane;
import io.laneway.lane.OwnLane;
import io.laneway.lane.Probe;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.common.constants.CommonConstants;
import org.apache.dubbo.common.extension.Activate;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.cluster.filter.ClusterFilter;

/**
 * Consumer side (SPI name {@code laneway-consumer}): an outgoing call without a {@code dubbo.tag}
 * gets the lane of the call being served, else this instance's own lane ({@link Lane#effective()}).
 *
 * <p>A {@link ClusterFilter}, because Dubbo routes in the cluster invoker, before ordinary
 * consumer filters run. Ordered after {@code ConsumerContextFilter}, which copies the
 * application's {@code RpcContext.getClientAttachment()} onto the invocation: a tag the
 * application set itself is already there and wins. A tag configured on the reference
 * ({@code tag} in {@code <dubbo:reference>}) wins over the own lane but not over the served
 * request's lane. The tag is set on the invocation before routing, so it travels with async
 * ({@code CompletableFuture}) calls as well.
 *
 * <p>A call that would go in no lane, made outside any request being served ({@link Lane#serving()}:
 * a scheduled job, a message consumer), is an RPC entry: it is drawn by the entry rules laneway
 * publishes for the providers' application, and a lane it is drawn into becomes its tag, which the
 * provider filter then carries along the chain.
 *
 * <p>A call made for a probed request ({@link Probe#forCall()}) carries the probe mark, and the hop
 * records it is answered with are added to the probe.
 */
@Activate(group = CommonConstants.CONSUMER, order = LaneConsumerFilter.ORDER)
public class LaneConsumerFilter implements ClusterFilter {
    /** After {@code ConsumerContextFilter} ({@link Integer#MIN_VALUE}). */
    public static final int ORDER = Integer.MIN_VALUE + 1000;

    @Override
    public Result invoke(Invoker<?> invoker, Invocation invocation) throws RpcException {
        // ConsumerContextFilter copies the whole server attachment, laneway's key included
        if (invocation.getObjectAttachmentWithoutConvert(DubboLane.SERVER_LANE_KEY) != null) {
            invocation.getObjectAttachments().remove(DubboLane.SERVER_LANE_KEY);
        }
        if (invocation.getObjectAttachmentWithoutConvert(DubboLane.TAG_KEY) == null) {
            String lane = Lane.current();
            if (lane == null && !hasConfiguredTag(invoker)) {
                lane = OwnLane.get();
                if (lane == null && !Lane.serving()) {
                    lane = DubboEntry.draw(invoker, invocation);
                }
            }
            if (lane != null) {
                invocation.setAttachment(DubboLane.TAG_KEY, lane);
            }
        }
        Probe probe = Probe.forCall();
        if (probe == null) {
            return invoker.invoke(invocation);
        }
        invocation.setAttachment(Probe.MARK, probe.mark());
        return invoker.invoke(invocation).whenCompleteWithContext((result, error) -> {
            Object hops = result == null ? null : result.getObjectAttachment(Probe.HOPS);
            if (hops instanceof String) {
                probe.collect((String) hops);
            }
        });
    }

    private static boolean hasConfiguredTag(Invoker<?> invoker) {
        URL url = invoker.getUrl();
        if (url == null) {
            return false;
        }
        String tag = url.getParameter(DubboLane.TAG_KEY);
        return tag != null && !tag.isEmpty();
    }
}
